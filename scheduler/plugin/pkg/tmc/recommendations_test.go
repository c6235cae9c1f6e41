package tmc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func published(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/v1alpha1", "kind": RecommendationKind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func graph500Spec(ways int64) map[string]any {
	return map[string]any{
		"schema": RecommendationSchema, "workload": "graph500", "objective": "slo:5%",
		"recommendation_id": "rec-1", "dram_bytes": int64(3 << 30), "slow_bytes": int64(1 << 30),
		"llc_ways": ways, "slow_ratio": 0.25,
		"plan": []any{map[string]any{"tag": "graph", "fast_bytes": int64(2 << 30), "slow_bytes": int64(1 << 30)}},
	}
}

func TestThePublishedRecommendationConfiguresThePod(t *testing.T) {
	index := NewRecommendationIndex()
	index.Set("graph500-slo", graph500Spec(6))
	pod := tieredPod("bfs", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%"}, "2", "4Gi")
	ask, err := ReadPodWith(pod, index)
	if err != nil {
		t.Fatal(err)
	}
	if ask.Fallback != nil || ask.Unpublished || ask.DRAMBytes != 3<<30 || ask.SlowBytes != 1<<30 || ask.LLCWays != 6 || len(ask.Plan) != 1 {
		t.Fatalf("ask from the published recommendation: %+v (fallback %v)", ask, ask.Fallback)
	}
	// Another objective has none published: the pod is unpublished and would fall back.
	other := tieredPod("bfs2", map[string]string{WorkloadAnnotation: "graph500"}, "2", "4Gi")
	ask, _ = ReadPodWith(other, index)
	if !ask.Unpublished || ask.Fallback == nil || !strings.Contains(*ask.Fallback, "no recommendation is published") {
		t.Fatalf("no recommendation for (graph500, cheapest): %+v", ask)
	}
	// A recommendation pinned on the pod wins over the published one (sized to the pod's 4Gi).
	pin, _ := json.Marshal(map[string]any{"schema": RecommendationSchema, "dram_bytes": 1 << 30, "slow_bytes": 0, "llc_ways": 2, "slow_ratio": 0, "plan": []any{}})
	pod.Annotations[RecommendationAnnotation] = string(pin)
	ask, _ = ReadPodWith(pod, index)
	if ask.LLCWays != 2 || ask.DRAMBytes != 4<<30 || ask.SlowBytes != 0 || ask.ProfileBytes != 1<<30 {
		t.Fatalf("pinned recommendation not used: %+v", ask)
	}
}

func TestAPublishedFallbackAndAnUnreadableSpecFallBackAtOnce(t *testing.T) {
	index := NewRecommendationIndex()
	index.Set("a", map[string]any{"schema": RecommendationSchema, "workload": "gone", "objective": "cheapest", "fallback": "the workload has no profile"})
	ask, _ := ReadPodWith(tieredPod("p", map[string]string{WorkloadAnnotation: "gone"}, "1", "1Gi"), index)
	if ask.Unpublished || ask.Fallback == nil || !strings.Contains(*ask.Fallback, "the workload has no profile") || ask.DRAMBytes != 1<<30 {
		t.Fatalf("published fallback: %+v", ask)
	}
	bad := graph500Spec(99)
	bad["objective"] = "cheapest"
	index.Set("b", bad)
	ask, _ = ReadPodWith(tieredPod("q", map[string]string{WorkloadAnnotation: "graph500"}, "1", "1Gi"), index)
	if ask.Unpublished || ask.Fallback == nil || !strings.Contains(*ask.Fallback, "published "+RecommendationKind+" is unreadable") {
		t.Fatalf("unreadable published spec: %+v", ask)
	}
}

func TestTheIndexFollowsRenamesAndDeletes(t *testing.T) {
	index := NewRecommendationIndex()
	index.Set("x", graph500Spec(4))
	spec := graph500Spec(4)
	spec["objective"] = "cheapest"
	index.Set("x", spec) // the same object now for another objective
	if _, ok := index.Lookup("graph500", "slo:5%"); ok {
		t.Error("the old key survived an update")
	}
	if _, ok := index.Lookup("graph500", "cheapest"); !ok || index.Len() != 1 {
		t.Error("the updated key is missing")
	}
	index.Set("y", map[string]any{"schema": RecommendationSchema}) // no workload: ignored
	index.Delete("x")
	if index.Len() != 0 {
		t.Errorf("index not empty after delete: %d", index.Len())
	}
}

func TestTheInformerFeedsTheIndex(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{RecommendationResource: RecommendationKind + "List"},
		published("graph500-slo", graph500Spec(6)))
	index, err := WatchRecommendations(ctx, client, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := index.Lookup("graph500", "slo:5%"); !ok {
		t.Fatal("the listed recommendation is not in the index after the sync")
	}
	if err := client.Resource(RecommendationResource).Delete(ctx, "graph500-slo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for index.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the delete event never reached the index")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAPodWaitsForItsRecommendationThenFallsBack(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &TmcPlacement{Engine: &Engine{cache: NewCache(), published: NewRecommendationIndex(), wait: 10 * time.Second, now: func() time.Time { return now }}}
	pod := tieredPod("new", map[string]string{WorkloadAnnotation: "graph500"}, "1", "1Gi")
	pod.CreationTimestamp = metav1.NewTime(now.Add(-3 * time.Second))
	_, status := p.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if status.Code() != fwk.Error || !strings.Contains(status.Message(), "waiting for the recommendation") {
		t.Fatalf("a young pod without a recommendation: %v", status)
	}
	pod.CreationTimestamp = metav1.NewTime(now.Add(-11 * time.Second))
	state := framework.NewCycleState()
	if _, status = p.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatalf("after the wait the pod is placed with the fallback: %v", status)
	}
	s, err := readState(state)
	if err != nil || s.ask.Fallback == nil {
		t.Fatalf("fallback expected: %+v %v", s, err)
	}
	// A pod naming no workload never waits.
	anon := tieredPod("anon", nil, "1", "1Gi")
	anon.CreationTimestamp = metav1.NewTime(now)
	if _, status = p.PreFilter(context.Background(), framework.NewCycleState(), anon, nil); !status.IsSuccess() {
		t.Fatalf("a pod without a workload waits for nothing: %v", status)
	}
}

// By default a pod of an unpublished pair waits for its object however old it is: unschedulable
// (so it is moved by the object's event, not retried on error backoff), never the fallback.
func TestByDefaultAPodWaitsUntilItsPairIsPublished(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	index := NewRecommendationIndex()
	p := &TmcPlacement{Engine: &Engine{cache: NewCache(), published: index, wait: DefaultRecommendationWait, now: func() time.Time { return now }}}
	pod := tieredPod("old", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5.000%"}, "1", "1Gi")
	pod.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	_, status := p.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), "waiting for the recommendation") {
		t.Fatalf("an hour-old pod of an unpublished pair: %v", status)
	}
	index.Set("graph500-slo", map[string]any{"workload": "graph500", "objective": "slo:5%", "dram_bytes": 1 << 30, "slow_bytes": 0, "llc_ways": 2, "slow_ratio": 0.0, "plan": []any{}})
	state := framework.NewCycleState()
	if _, status = p.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatalf("once published: %v", status)
	}
	if s, err := readState(state); err != nil || s.ask.Fallback != nil {
		t.Fatalf("the published recommendation expected: %+v %v", s, err)
	}
}

func TestRecommendationHintQueuesOnlyThePodsOfThePair(t *testing.T) {
	pod := tieredPod("p", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5.000%"}, "1", "1Gi")
	object := func(workload, objective string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"workload": workload, "objective": objective}}}
	}
	for name, c := range map[string]struct {
		obj  any
		want fwk.QueueingHint
	}{
		"its pair":          {object("graph500", "slo:5%"), fwk.Queue},
		"another workload":  {object("bfs", "slo:5%"), fwk.QueueSkip},
		"another objective": {object("graph500", "cheapest"), fwk.QueueSkip},
		"not an object":     {"x", fwk.Queue},
	} {
		if got, err := RecommendationHint(klog.Background(), pod, nil, c.obj); err != nil || got != c.want {
			t.Errorf("%s: %v %v", name, got, err)
		}
	}
	plugin := &TmcPlacement{Engine: &Engine{cache: NewCache(), published: NewRecommendationIndex()}}
	anon := tieredPod("anon", map[string]string{WorkloadAnnotation: "kv"}, "1", "1Gi")
	if got, _ := RecommendationHint(klog.Background(), anon, nil, object("kv", "cheapest")); got != fwk.Queue {
		t.Errorf("a pod without an objective waits for the cheapest: %v", got)
	}
	events, err := plugin.EventsToRegister(context.Background())
	if err != nil || len(events) != 4 || events[0].Event.Resource != "tieredrecommendations.v1alpha1.tmc.dev" {
		t.Errorf("events: %+v %v", events, err)
	}
}

func TestPodHintIgnoresTheSchedulersOwnStatusWrites(t *testing.T) {
	pod := tieredPod("p", map[string]string{WorkloadAnnotation: "kv"}, "1", "1Gi")
	pod.UID = "p"
	status := pod.DeepCopy()
	status.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
	renamed := pod.DeepCopy()
	renamed.Annotations[WorkloadAnnotation] = "db"
	other := tieredPod("q", nil, "1", "1Gi")
	other.UID = "q"
	ended := other.DeepCopy()
	ended.Status.Phase = v1.PodSucceeded
	for name, c := range map[string]struct {
		before, after *v1.Pod
		want          fwk.QueueingHint
	}{
		"its own status":         {pod, status, fwk.QueueSkip},
		"its own annotations":    {pod, renamed, fwk.Queue},
		"another pod running":    {other, other, fwk.QueueSkip},
		"another pod that ended": {other, ended, fwk.Queue},
	} {
		if got, err := PodHint(klog.Background(), pod, c.before, c.after); err != nil || got != c.want {
			t.Errorf("%s: %v %v", name, got, err)
		}
	}
}

func TestPodDeletedHintQueuesForAnotherPodOnly(t *testing.T) {
	waiting := tieredPod("waiting", nil, "1", "1Gi")
	waiting.UID = "waiting"
	gone := tieredPod("gone", nil, "1", "1Gi")
	gone.UID = "gone"
	gone.Spec.NodeName = "a"
	for name, c := range map[string]struct {
		old  any
		want fwk.QueueingHint
	}{
		"another pod":            {gone, fwk.Queue},
		"its final state":        {cache.DeletedFinalStateUnknown{Obj: gone}, fwk.Queue},
		"the pod itself":         {waiting, fwk.QueueSkip},
		"not a pod":              {"x", fwk.Queue},
		"a pending pod's delete": {tieredPod("pending", nil, "1", "1Gi"), fwk.Queue},
	} {
		if got, err := PodDeletedHint(klog.Background(), waiting, c.old, nil); err != nil || got != c.want {
			t.Errorf("%s: %v %v", name, got, err)
		}
	}
}

func TestArgsAreBounded(t *testing.T) {
	if wait, pools, err := ParseArgs(nil); err != nil || wait != WaitUntilPublished || len(pools) != 0 {
		t.Errorf("default: %v %v %v", wait, pools, err)
	}
	for raw, ok := range map[string]bool{
		`{"recommendationWaitSeconds": 0}`: true, `{"recommendationWaitSeconds": 301}`: false, `{"recommendationWaitSeconds": -1}`: true, `{"recommendationWaitSeconds": -2}`: false,
		`{"rackPools": {"rack-a": "256Gi"}}`: true, `{"rackPools": {"Rack A": "1Gi"}}`: false, `{"rackPools": {"r": "-1"}}`: false,
		`{"rackPools": {"r": "5Pi"}}`: false, `{"rackPools": {"r": "lots"}}`: false, `{"rackPools": {"r": "0.5"}}`: false,
	} {
		_, _, err := ParseArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
		if (err == nil) != ok {
			t.Errorf("%s: %v", raw, err)
		}
	}
	_, pools, err := ParseArgs(&runtime.Unknown{Raw: []byte(`{"rackPools": {"rack-a": "256Gi"}}`), ContentType: runtime.ContentTypeJSON})
	if err != nil || pools["rack-a"] != 256<<30 {
		t.Errorf("rackPools: %v %v", pools, err)
	}
}
