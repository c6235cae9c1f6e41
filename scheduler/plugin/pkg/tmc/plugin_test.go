package tmc

import (
	"context"
	"fmt"
	"math/bits"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

func tmcNode(name string, cpus, dram, slow int64, ways int, pool string, poolBytes int64) *v1.Node {
	ann := map[string]string{
		DRAMAnnotation: fmt.Sprint(dram), SlowAnnotation: fmt.Sprint(slow), LLCWaysAnnotation: fmt.Sprint(ways),
		CPUsAnnotation: fmt.Sprint(cpus),
	}
	if pool != "" {
		ann[SlowPoolAnnotation] = pool
		ann[SlowPoolBytesAnnotation] = fmt.Sprint(poolBytes)
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, Labels: map[string]string{HostKindLabel: "optane"}},
		Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
}

// harness runs pods through the plugin's extension points as kube-scheduler's scheduling and
// binding cycles do, one pod at a time, against a fake API server.
type harness struct {
	t      *testing.T
	plugin *TmcPlacement
	client *fake.Clientset
	nodes  map[string]*v1.Node
	infos  map[string]fwk.NodeInfo
}

func newHarness(t *testing.T, nodes ...*v1.Node) *harness {
	h := &harness{t: t, client: bindingClient(), nodes: map[string]*v1.Node{}, infos: map[string]fwk.NodeInfo{}}
	for _, n := range nodes {
		h.nodes[n.Name] = n
		info := framework.NewNodeInfo()
		info.SetNode(n)
		h.infos[n.Name] = info
	}
	h.plugin = h.restart()
	return h
}

// restart is a new plugin (a scheduler that restarted) fed by the informers' initial lists.
func (h *harness) restart() *TmcPlacement {
	p := &TmcPlacement{Engine: &Engine{client: h.client, cache: NewCache()}, node: func(name string) (*v1.Node, error) {
		if n, ok := h.nodes[name]; ok {
			return n, nil
		}
		return nil, fmt.Errorf("node %s not found", name)
	}}
	for _, n := range h.nodes {
		p.ObserveNode(n)
	}
	pods, err := h.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for i := range pods.Items {
		p.ObservePod(&pods.Items[i])
	}
	return p
}

// bindingClient is a fake API server whose pods/binding does what the real one does: with the
// Binding's UID as a precondition and a pod not bound yet, it sets the node and writes the
// Binding's annotations onto the pod in one update.
func bindingClient() *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(clienttesting.CreateAction).GetObject().(*v1.Binding)
		obj, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*v1.Pod).DeepCopy()
		if b.UID != "" && pod.UID != b.UID {
			return true, nil, fmt.Errorf("409 Conflict: the pod's UID is %s, not %s", pod.UID, b.UID)
		}
		if pod.Spec.NodeName != "" {
			return true, nil, fmt.Errorf("409 Conflict: pod %s is already bound to %s", pod.Name, pod.Spec.NodeName)
		}
		pod.Spec.NodeName = b.Target.Name
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		for k, v := range b.Annotations {
			pod.Annotations[k] = v
		}
		return true, nil, client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), pod, pod.Namespace)
	})
	return client
}

// schedule runs one cycle and, when a node is chosen, the binding cycle (Bind, whose Binding
// carries the placement), whose bound pod the pod informer delivers to ObservePod.
func (h *harness) schedule(pod *v1.Pod) (string, *fwk.Status) {
	ctx := context.Background()
	if _, err := h.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	p := h.plugin
	state := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		return "", st
	}
	best, bestScore := "", int64(-1)
	for _, name := range sortedNames(h.infos) {
		if st := p.Filter(ctx, state, pod, h.infos[name]); !st.IsSuccess() {
			continue
		}
		if st := p.PreScore(ctx, state, pod, nil); !st.IsSuccess() {
			h.t.Fatalf("PreScore: %v", st)
		}
		score, st := p.Score(ctx, state, pod, h.infos[name])
		if !st.IsSuccess() {
			h.t.Fatalf("Score: %v", st)
		}
		if score > bestScore {
			best, bestScore = name, score
		}
	}
	if best == "" {
		return "", fwk.NewStatus(fwk.Unschedulable, "no node fits")
	}
	if st := p.Reserve(ctx, state, pod, best); !st.IsSuccess() {
		p.Unreserve(ctx, state, pod, best)
		return "", st
	}
	if st := p.Bind(ctx, state, pod, best); !st.IsSuccess() {
		p.Unreserve(ctx, state, pod, best)
		return "", st
	}
	bound, err := h.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	p.ObservePod(bound) // the pod informer's update of the bound pod
	return best, nil
}

func sortedNames(m map[string]fwk.NodeInfo) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	for i := range names {
		for j := i + 1; j < len(names); j++ {
			if names[j] < names[i] {
				names[i], names[j] = names[j], names[i]
			}
		}
	}
	return names
}

func TestPodsThatDoNotOptInSkipThePlugin(t *testing.T) {
	h := newHarness(t, tmcNode("n", 8, 1<<30, 0, 8, "", 0))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default", UID: "plain"}}
	state := framework.NewCycleState()
	ctx := context.Background()
	if _, st := h.plugin.PreFilter(ctx, state, pod, nil); st.Code() != fwk.Skip {
		t.Errorf("PreFilter: %v", st)
	}
	if st := h.plugin.PreScore(ctx, state, pod, nil); st.Code() != fwk.Skip {
		t.Errorf("PreScore: %v", st)
	}
	if st := h.plugin.Reserve(ctx, state, pod, "n"); !st.IsSuccess() || h.plugin.cache.Len() != 0 {
		t.Errorf("Reserve: %v, %d reservations", st, h.plugin.cache.Len())
	}
	if st := h.plugin.Bind(ctx, state, pod, "n"); st.Code() != fwk.Skip {
		t.Errorf("Bind of a plain pod is left to DefaultBinder: %v", st)
	}
	if _, st := h.plugin.SignPod(ctx, pod); !st.IsSuccess() {
		t.Errorf("SignPod of a plain pod: %v", st)
	}
	if _, st := h.plugin.SignPod(ctx, tieredPod("t", nil, "1", "1Gi")); st.IsSuccess() {
		t.Error("a tiered pod was signed for batching")
	}
}

func TestFilterReasons(t *testing.T) {
	plain := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	broken := tmcNode("broken", 8, 1<<30, 0, 8, "", 0)
	broken.Annotations[LLCWaysAnnotation] = "many"
	allocatable := tmcNode("alloc", 0, 1<<30, 0, 8, "", 0)
	delete(allocatable.Annotations, CPUsAnnotation)
	allocatable.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("3500m")}
	h := newHarness(t, plain, broken, allocatable)
	ctx := context.Background()
	state := framework.NewCycleState()
	pod := tieredPod("p", nil, "4", "1Gi")
	if _, st := h.plugin.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	for name, want := range map[string]fwk.Code{"plain": fwk.UnschedulableAndUnresolvable, "broken": fwk.UnschedulableAndUnresolvable, "alloc": fwk.UnschedulableAndUnresolvable} {
		if st := h.plugin.Filter(ctx, state, pod, h.infos[name]); st.Code() != want {
			t.Errorf("%s: %v, want %v", name, st, want)
		}
	}
	// 3.5 allocatable CPUs are 3 whole ones: a 3-CPU pod fits.
	state = framework.NewCycleState()
	pod = tieredPod("q", nil, "3", "1Gi")
	h.plugin.PreFilter(ctx, state, pod, nil)
	if st := h.plugin.Filter(ctx, state, pod, h.infos["alloc"]); !st.IsSuccess() {
		t.Errorf("alloc, 3 CPUs: %v", st)
	}
}

func TestBindWritesTheExtendersPlacement(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 64<<30, 0, 11, "", 0))
	rec := `{"schema":"tmc.recommendation/v1","recommendation_id":"r-1","dram_bytes":2147483648,"slow_bytes":0,"llc_ways":3,"slow_ratio":0}`
	pod := tieredPod("bfs", map[string]string{WorkloadAnnotation: "graph500", RecommendationAnnotation: rec}, "2", "2Gi")
	node, st := h.schedule(pod)
	if !st.IsSuccess() || node != "n1" {
		t.Fatalf("scheduled on %q: %v", node, st)
	}
	got, _ := h.client.CoreV1().Pods("default").Get(context.Background(), "bfs", metav1.GetOptions{})
	want := `{"schema":"tmc.placement/v2","node":"n1","workload":"graph500","objective":"cheapest","configuration":{"vcpus":2,"dram_bytes":2147483648,"slow_bytes":0,"slow_ratio":0.0,"llc_ways":3},"llc_mask":"0x7","slow_from_pool":false,"recommendation_id":"r-1","fallback":null,"plan":[]}`
	if got.Annotations[PlacementAnnotation] != want || got.Annotations[LLCMaskAnnotation] != "0x7" {
		t.Errorf("annotations:\n got %s %s\nwant %s 0x7", got.Annotations[PlacementAnnotation], got.Annotations[LLCMaskAnnotation], want)
	}
	if r, ok := h.plugin.cache.Held(pod.UID); !ok || !r.Bound {
		t.Errorf("the bound pod is not counted as bound: %+v", r)
	}
}

func TestUnreserveForgetsAndTheNextPodGetsTheWays(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 64<<30, 0, 4, "", 0))
	ctx := context.Background()
	pod := tieredPod("a", nil, "1", "1Gi")
	state := framework.NewCycleState()
	h.plugin.PreFilter(ctx, state, pod, nil)
	if st := h.plugin.Reserve(ctx, state, pod, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if r, _ := h.plugin.cache.Held(pod.UID); r.LLCMask != 0xf {
		t.Fatalf("the fallback takes the whole free run: %#x", r.LLCMask)
	}
	// Another pod finds no way free while the first is assumed...
	other := tieredPod("b", nil, "1", "1Gi")
	s2 := framework.NewCycleState()
	h.plugin.PreFilter(ctx, s2, other, nil)
	if st := h.plugin.Filter(ctx, s2, other, h.infos["n1"]); st.Code() != fwk.Unschedulable {
		t.Errorf("with every way assumed: %v", st)
	}
	// ...and fits once the first is unreserved (a later plugin rejected it).
	h.plugin.Unreserve(ctx, state, pod, "n1")
	h.plugin.Unreserve(ctx, state, pod, "n1") // idempotent
	if st := h.plugin.Filter(ctx, s2, other, h.infos["n1"]); !st.IsSuccess() {
		t.Errorf("after Unreserve: %v", st)
	}
}

// A burst through the plugin never over-commits a node, checked against the sum of the bound
// pods' placements as the API server holds them; and a restarted plugin rebuilt from those
// placements sees exactly what the first one held.
func TestBurstNeverOvercommitsAndRestartRecovers(t *testing.T) {
	h := newHarness(t,
		tmcNode("a", 8, 32<<30, 32<<30, 11, "", 0),
		tmcNode("b", 8, 32<<30, 0, 11, "rack", 64<<30),
		tmcNode("c", 4, 16<<30, 0, 8, "rack", 64<<30),
	)
	placed, refused := 0, 0
	for i := range 40 {
		ways := 1 + i%4
		rec := fmt.Sprintf(`{"schema":"tmc.recommendation/v1","dram_bytes":%d,"slow_bytes":%d,"llc_ways":%d,"slow_ratio":0.5}`, 2<<30, 2<<30, ways)
		ann := map[string]string{RecommendationAnnotation: rec}
		if i%5 == 0 {
			ann = nil // the fallback: all of the memory request in DRAM, the longest free run
		}
		pod := tieredPod(fmt.Sprintf("p%02d", i), ann, "1", "3Gi")
		if _, st := h.schedule(pod); st.IsSuccess() {
			placed++
		} else {
			refused++
		}
	}
	t.Logf("%d pods placed, %d refused", placed, refused)
	if placed == 0 || refused == 0 {
		t.Fatalf("the burst should fill the nodes: %d placed, %d refused", placed, refused)
	}

	type total struct {
		cpus, dram, slowLocal, slowPool int64
		mask                            uint64
	}
	sums := map[string]*total{}
	pods, _ := h.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	bound := 0
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == "" {
			continue
		}
		bound++
		p, err := ParsePlacement(pod.Annotations)
		if err != nil || p == nil || p.Node != pod.Spec.NodeName {
			t.Fatalf("%s: placement %+v, %v", pod.Name, p, err)
		}
		s := sums[p.Node]
		if s == nil {
			s = &total{}
			sums[p.Node] = s
		}
		if s.mask&p.LLCMaskBits() != 0 {
			t.Errorf("%s: ways %s already held on %s", pod.Name, p.LLCMask, p.Node)
		}
		s.mask |= p.LLCMaskBits()
		s.cpus += p.Configuration.VCPUs
		s.dram += p.Configuration.DRAMBytes
		if p.SlowFromPool {
			s.slowPool += p.Configuration.SlowBytes
		} else {
			s.slowLocal += p.Configuration.SlowBytes
		}
	}
	if bound != placed {
		t.Errorf("%d pods bound, %d placed", bound, placed)
	}
	var pool int64
	for name, s := range sums {
		c, _ := ParseNodeCapacity(h.nodes[name].Labels, h.nodes[name].Annotations)
		if s.cpus > c.CPUs || s.dram > c.DRAMBytes || s.slowLocal > c.SlowBytes || bits.Len64(s.mask) > c.LLCWays {
			t.Errorf("%s over-committed: %+v of %+v", name, *s, *c)
		}
		pool += s.slowPool
	}
	if pool > 64<<30 {
		t.Errorf("the rack pool holds %d bytes of 64 GiB", pool)
	}

	restarted := h.restart()
	for name := range h.nodes {
		c, _ := ParseNodeCapacity(h.nodes[name].Labels, h.nodes[name].Annotations)
		if was, now := h.plugin.cache.Usage(name, c, c.CPUs), restarted.cache.Usage(name, c, c.CPUs); was != now {
			t.Errorf("%s after a restart: %+v, was %+v", name, now, was)
		}
	}
	if restarted.cache.Len() != placed {
		t.Errorf("restarted with %d reservations, %d pods placed", restarted.cache.Len(), placed)
	}

	// A pod that ends releases what it held.
	var victim v1.Pod
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" {
			victim = pod
			break
		}
	}
	victim.Status.Phase = v1.PodSucceeded
	restarted.ObservePod(&victim)
	if _, ok := restarted.cache.Held(types.UID(victim.UID)); ok {
		t.Error("a finished pod still holds its reservation")
	}
}

// TestStatusMessagesAreNoFormatStrings: kube-scheduler records a pod's FailedScheduling event
// with the status message as a format string; a percent in an objective must survive it.
func TestStatusMessagesAreNoFormatStrings(t *testing.T) {
	msg := `tmc: waiting for the recommendation of workload "graph500", objective "slo:5%"`
	var none []any // as the event recorder calls it: the message, no arguments
	got := fmt.Sprintf(newStatus(fwk.Error, msg).Message(), none...)
	if strings.Contains(got, "%!") || !strings.Contains(got, `"slo:5 percent"`) || strings.ContainsRune(got, '\uff05') {
		t.Fatalf("the event would read %q", got)
	}
	if asStatus(nil) != nil {
		t.Fatal("asStatus(nil) is success")
	}
}

// TestFilterJudgesThePodOfItsOwnCycle: Filter and Score find the ask of the cycle PreFilter
// last began without the state's map; a state of another cycle (an earlier pod's) or a copy of
// this one (preemption's) is read from the state itself, so each pod is judged by its own ask.
func TestFilterJudgesThePodOfItsOwnCycle(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 8<<30, 0, 11, "", 0))
	ctx := context.Background()
	big, small := tieredPod("big", nil, "1", "16Gi"), tieredPod("small", nil, "1", "1Gi")
	sBig, sSmall := framework.NewCycleState(), framework.NewCycleState()
	if _, st := h.plugin.PreFilter(ctx, sBig, big, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if _, st := h.plugin.PreFilter(ctx, sSmall, small, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := h.plugin.Filter(ctx, sSmall, small, h.infos["n1"]); !st.IsSuccess() {
		t.Errorf("the pod of the cycle in progress: %v", st)
	}
	if st := h.plugin.Filter(ctx, sBig, big, h.infos["n1"]); st.IsSuccess() {
		t.Error("a pod of an earlier cycle was judged by the ask of the cycle in progress")
	}
	if st := h.plugin.Filter(ctx, sSmall.Clone(), small, h.infos["n1"]); !st.IsSuccess() {
		t.Errorf("a copy of the cycle's state: %v", st)
	}
	if _, st := h.plugin.Score(ctx, sBig, big, h.infos["n1"]); !st.IsSuccess() {
		t.Errorf("Score with an earlier cycle's state: %v", st)
	}
}

// A pod asking for less memory than its recommendation was profiled at is bound with what it
// asked for (never cut below it) and told so in a Warning, in sizes as Kubernetes writes them;
// a pod at or above its profile's footprint gets no such event.
func TestAPodBelowItsProfileIsToldWhatItWasGiven(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 64<<30, 64<<30, 11, "", 0))
	recorder := events.NewFakeRecorder(10)
	SetRecorder(h.plugin.Engine, recorder)
	rec := `{"schema":"tmc.recommendation/v1","recommendation_id":"r-1","dram_bytes":25165824,"slow_bytes":8388608,"llc_ways":3,"slow_ratio":0.25}`
	small := tieredPod("small", map[string]string{WorkloadAnnotation: "stream", RecommendationAnnotation: rec}, "1", "16Mi")
	if _, st := h.schedule(small); !st.IsSuccess() {
		t.Fatal(st)
	}
	select {
	case got := <-recorder.Events:
		want := `Warning MemoryBelowProfile the pod requests 16Mi of memory, less than the 32Mi its recommendation for workload "stream" was profiled at: ` +
			`it is given its request, 12Mi of DRAM and 4Mi of slow memory (slow ratio 0.25); if the program needs its profile's footprint, raise the pod's memory request`
		if got != want {
			t.Errorf("event\n got %s\nwant %s", got, want)
		}
	default:
		t.Fatal("no event for a pod below its profile")
	}
	for _, memory := range []string{"32Mi", "4Gi"} {
		pod := tieredPod("at-"+strings.ToLower(memory), map[string]string{WorkloadAnnotation: "stream", RecommendationAnnotation: rec}, "1", memory)
		if _, st := h.schedule(pod); !st.IsSuccess() {
			t.Fatal(st)
		}
	}
	if n := len(recorder.Events); n != 0 {
		t.Errorf("%d events for pods at or above their profile: %s", n, <-recorder.Events)
	}
}

// A pod that requests no memory holds its recommendation's own bytes, and its placement says so
// (sized_from: recommendation), so that the node limits none of its containers to bytes the pod
// never asked for; a Normal event tells it how to be given a size of its own. A pod with a
// memory request, and a fallback (its request, here none, in DRAM), say nothing of it.
func TestAPodRequestingNoMemoryIsToldItHoldsItsRecommendationsFootprint(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 64<<30, 64<<30, 11, "", 0))
	recorder := events.NewFakeRecorder(10)
	SetRecorder(h.plugin.Engine, recorder)
	rec := `{"schema":"tmc.recommendation/v1","recommendation_id":"r-1","dram_bytes":25165824,"slow_bytes":8388608,"llc_ways":3,"slow_ratio":0.25}`
	noMemory := func(pod *v1.Pod) *v1.Pod {
		delete(pod.Spec.Containers[0].Resources.Requests, v1.ResourceMemory)
		return pod
	}
	placementOf := func(name string) *Placement {
		bound, err := h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParsePlacement(bound.Annotations)
		if err != nil || p == nil {
			t.Fatalf("%s: placement %v, %v", name, p, err)
		}
		return p
	}
	if _, st := h.schedule(noMemory(tieredPod("none", map[string]string{WorkloadAnnotation: "stream", RecommendationAnnotation: rec}, "1", "1Mi"))); !st.IsSuccess() {
		t.Fatal(st)
	}
	p := placementOf("none")
	if p.SizedFrom == nil || *p.SizedFrom != v1alpha1.SizedFromRecommendation || p.SizedFromRequest() ||
		p.Configuration.DRAMBytes != 24<<20 || p.Configuration.SlowBytes != 8<<20 {
		t.Errorf("a pod requesting no memory: sized from %v, %d DRAM and %d slow", p.SizedFrom, p.Configuration.DRAMBytes, p.Configuration.SlowBytes)
	}
	select {
	case got := <-recorder.Events:
		want := `Normal MemoryNotRequested the pod requests no memory: it holds the footprint its recommendation for workload "stream" was made for, ` +
			`24Mi of DRAM and 8Mi of slow memory (slow ratio 0.25), and tmc sets no memory limit on its containers; ` +
			`give the pod a memory request of the size it runs at to be given that size, split by the recommendation`
		if got != want {
			t.Errorf("event\n got %s\nwant %s", got, want)
		}
	default:
		t.Fatal("no event for a pod requesting no memory")
	}
	if _, st := h.schedule(tieredPod("sized", map[string]string{WorkloadAnnotation: "stream", RecommendationAnnotation: rec}, "1", "4Gi")); !st.IsSuccess() {
		t.Fatal(st)
	}
	if _, st := h.schedule(noMemory(tieredPod("fallback", nil, "1", "1Mi"))); !st.IsSuccess() {
		t.Fatal(st)
	}
	for _, name := range []string{"sized", "fallback"} {
		if p := placementOf(name); p.SizedFrom != nil || !p.SizedFromRequest() {
			t.Errorf("%s: sized from %s", name, *p.SizedFrom)
		}
	}
	if n := len(recorder.Events); n != 0 {
		t.Errorf("%d events for a pod with a request and a fallback: %s", n, <-recorder.Events)
	}
}
