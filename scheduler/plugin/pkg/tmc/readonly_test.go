package tmc

import (
	"context"
	"maps"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// cacheSnapshot is everything the cache accounts, copied: two snapshots are equal when nothing
// was reserved, released, bound or moved between them.
type cacheSnapshot struct {
	Pods     map[types.UID]Reservation
	Nodes    map[string]nodeSums
	Released int
	Pools    map[string][2]int64
	Claims   map[string]int64
}

type nodeSums struct {
	CPUs, DRAM, SlowLocal, SlowFromPool int64
	Mask                                uint64
	Masks                               map[types.UID]uint64
	Placed                              map[PlacedKey]int
	Member                              string
}

func snapshot(c *Cache) cacheSnapshot {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s := cacheSnapshot{Pods: maps.Clone(c.pods), Nodes: map[string]nodeSums{}, Released: len(c.released),
		Pools: map[string][2]int64{}, Claims: maps.Clone(c.claims)}
	for name, n := range c.nodes {
		s.Nodes[name] = nodeSums{n.cpus, n.dram, n.slowLocal, n.slowFromPool, n.mask, maps.Clone(n.masks), maps.Clone(n.placed), n.member}
	}
	for name, rp := range c.pools {
		s.Pools[name] = [2]int64{rp.usedLocked, rp.claim.size}
	}
	return s
}

// boundPod is a pod bound to node with a placement of cpus CPUs and 1 GiB of DRAM.
func boundPod(t *testing.T, name, node string, cpus int64) *v1.Pod {
	t.Helper()
	pod := tieredPod(name, nil, "1", "1Gi")
	pod.UID = types.UID(name)
	pod.Spec.NodeName = node
	ann, err := PlacementAnnotations(&Placement{
		Schema: PlacementSchema, Node: node, Objective: "cheapest", LLCMask: "0x3",
		Configuration: PlacedConfiguration{VCPUs: cpus, DRAMBytes: 1 << 30, LLCWays: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = ann
	return pod
}

// kube-scheduler calls a hint once per pending pod for each event: the hints change neither the
// cache nor the recommendation index, whatever the event.
func TestHintsOnlyRead(t *testing.T) {
	index := NewRecommendationIndex()
	index.Set("kv-cheapest", map[string]any{"workload": "kv", "objective": "cheapest"})
	p := &TmcPlacement{Engine: &Engine{cache: NewCache(), published: index}}
	p.ObserveNode(tmcNode("a", 4, 32<<30, 0, 8, "", 0))
	bound := boundPod(t, "bound", "a", 2)
	p.ObservePod(bound)
	if _, err := p.cache.Assume("assumed", "a", &NodeCapacity{DRAMBytes: 32 << 30, LLCWays: 8}, 4, fallbackAsk(1, 1<<30)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(p.cache)

	waiting := tieredPod("waiting", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%"}, "1", "1Gi")
	waiting.UID = "waiting"
	ended := bound.DeepCopy()
	ended.Status.Phase = v1.PodSucceeded
	object := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"workload": "graph500", "objective": "slo:5%"}}}
	object.SetName("graph500-slo")
	events, err := p.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, event := range events {
		if event.QueueingHintFn == nil {
			continue
		}
		for _, change := range [][2]any{{nil, object}, {bound, nil}, {bound, ended}, {waiting, waiting}} {
			if _, err := event.QueueingHintFn(klog.Background(), waiting, change[0], change[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := snapshot(p.cache); !reflect.DeepEqual(before, after) {
		t.Errorf("a hint changed the cache:\nbefore %+v\nafter  %+v", before, after)
	}
	if _, ok := index.Lookup("graph500", "slo:5%"); ok || index.Len() != 1 {
		t.Errorf("a hint changed the index: %d held", index.Len())
	}
}

// Filter reads: a node full with a pod the informer's store no longer holds (deleted; the
// engine's own handler not run yet) fits the pod the deletion moved, and the cache still holds
// the gone pod until the handler releases it.
func TestFitOnlyReadsAndJudgesWithoutGonePods(t *testing.T) {
	e := &Engine{cache: NewCache()}
	node := tmcNode("a", 2, 4<<30, 0, 8, "", 0)
	node.ResourceVersion = "1"
	e.ObserveNode(node)
	e.ObservePod(boundPod(t, "gone", "a", 2))
	ask := fallbackAsk(1, 1<<30)

	if v := e.Fit(node, ask); v == nil || v.Unresolvable {
		t.Fatalf("without a pod store the node is full: %+v", v)
	}
	stored := map[types.UID]bool{"gone": true}
	e.podExists = func(uid types.UID) bool { return stored[uid] }
	if v := e.Fit(node, ask); v == nil {
		t.Fatal("a pod the store holds still counts")
	}
	delete(stored, "gone")
	before := snapshot(e.cache)
	for range 3 {
		if v := e.Fit(node, ask); v != nil {
			t.Fatalf("the room of a pod the store no longer holds: %+v", v)
		}
	}
	if after := snapshot(e.cache); !reflect.DeepEqual(before, after) {
		t.Errorf("Fit changed the cache:\nbefore %+v\nafter  %+v", before, after)
	}
	if _, held := e.cache.Held("gone"); !held {
		t.Fatal("Fit released a reservation")
	}
	// Reserve judges as Filter did; the handler's release then leaves the new pod alone.
	r, err := e.Reserve("new", node, ask)
	if err != nil {
		t.Fatalf("Reserve after Filter passed: %v", err)
	}
	e.cache.Release("gone") // the pod informer's delete handler
	capacity, cpus, _ := nodeCapacity(node)
	if u := e.cache.Usage("a", capacity, cpus); u.UsedCPUs != 1 || u.UsedMask != r.LLCMask || e.cache.Len() != 1 {
		t.Errorf("after the handler released the gone pod: %+v, %d held", u, e.cache.Len())
	}
}

type activations struct{ pods []string }

func (a *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	for key := range pods {
		a.pods = append(a.pods, key)
	}
}

var _ fwk.PodActivator = (*activations)(nil)

// The recommendation informer's handler, not the hint, moves the pods waiting for a pair: once
// the plugin's index holds the pair's object, the pods not bound yet that read it are moved.
func TestThePairsObjectMovesItsWaitingPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := tieredPod("waiting", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5.000%"}, "1", "1Gi")
	other := tieredPod("other", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "cheapest"}, "1", "1Gi")
	bound := boundPod(t, "bound", "a", 1)
	bound.Annotations[WorkloadAnnotation] = "graph500"
	bound.Annotations[ObjectiveAnnotation] = "slo:5%"
	p, _ := watched(ctx, t, waiting, other, bound)

	moved := &activations{}
	index := NewRecommendationIndex()
	index.OnPublished(func(workload, objective string) { p.activateWaiting(moved, workload, objective) })
	index.Handler().OnAdd(published("graph500-slo", graph500Spec(2)), false)
	if len(moved.pods) != 1 || moved.pods[0] != "default/waiting" {
		t.Errorf("moved %v, want the waiting pod of the pair only", moved.pods)
	}
	if _, ok := index.Lookup("graph500", "slo:5%"); !ok {
		t.Error("the index does not hold the object it moved the pods for")
	}
}
