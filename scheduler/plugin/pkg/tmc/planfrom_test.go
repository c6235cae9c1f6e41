package tmc

import (
	"encoding/json"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// A pod placed from a published recommendation carries the object's name and generation, not
// its plan (tmc.placement/v3): every later event of the pod is that much smaller, and the node
// sizes the plan as the engine would have. A pinned recommendation's plan stays on the pod.
func TestAPublishedPlanIsNamedNotCarried(t *testing.T) {
	index := NewRecommendationIndex()
	index.NamePlans(true)
	spec := map[string]any{
		"schema": RecommendationSchema, "workload": "graph500", "objective": "cheapest",
		"dram_bytes": 6 << 30, "slow_bytes": 2 << 30, "llc_ways": 4, "slow_ratio": 0.25,
		"plan": []any{map[string]any{"tag": "edges", "fast_bytes": 4 << 30, "slow_bytes": 2 << 30}},
	}
	index.SetAt("graph500-cheapest-1a2b3c4d5e6f", 7, spec)
	raw, _ := index.Lookup("graph500", "cheapest")
	held := Reservation{Node: "node-a", VCPUs: 1, LLCMask: RunMask(0, 4)}

	ask, err := ReadPodWith(tieredPod("a", map[string]string{WorkloadAnnotation: "graph500"}, "1", "4Gi"), index)
	must(t, err)
	held.DRAMBytes, held.SlowBytes = ask.DRAMBytes, ask.SlowBytes
	ann, err := PlacementAnnotations(PlacementOf(ask, held))
	must(t, err)
	var body map[string]any
	must(t, json.Unmarshal([]byte(ann[PlacementAnnotation]), &body))
	from, _ := body["plan_from"].(map[string]any)
	if body["schema"] != PlacementSchemaV3 || len(body["plan"].([]any)) != 0 ||
		from["recommendation"] != "graph500-cheapest-1a2b3c4d5e6f" || from["generation"] != 7.0 {
		t.Fatalf("placement %s", ann[PlacementAnnotation])
	}
	// What the node makes of it is what the engine would have written on the pod.
	read, err := v1alpha1.ParsePlacement(ann)
	must(t, err)
	var rec Recommendation
	must(t, json.Unmarshal(raw, &rec))
	_, _, engine := SizeToPod(&rec, ask.MemoryBytes)
	node := v1alpha1.SizePlan(rec.Plan, rec.DRAMBytes, rec.SlowBytes, read.Configuration.DRAMBytes, read.Configuration.SlowBytes)
	if !slices.Equal(engine, node) || len(node) != 1 || node[0].FastBytes != 2<<30 {
		t.Fatalf("engine sized %+v, node %+v", engine, node)
	}

	pinned, err := ReadPodWith(tieredPod("b", map[string]string{WorkloadAnnotation: "graph500", RecommendationAnnotation: string(raw)}, "1", "4Gi"), index)
	must(t, err)
	ann, err = PlacementAnnotations(PlacementOf(pinned, held))
	must(t, err)
	read, err = v1alpha1.ParsePlacement(ann)
	must(t, err)
	if read.Schema != PlacementSchema || read.PlanFrom != nil || !slices.Equal(read.Plan, engine) {
		t.Fatalf("pinned placement %s", ann[PlacementAnnotation])
	}
}

// An object deleted and made again under the same name counts its generations from 1 again: a
// placement names the object's uid with its generation, as the informer delivered it, so that a
// node never takes the new object's generation for the old one's.
func TestAPlacementNamesTheObjectsUID(t *testing.T) {
	index := NewRecommendationIndex()
	index.NamePlans(true)
	handler := index.Handler()
	object := func(uid string, generation int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "tmc.dev/v1alpha1", "kind": RecommendationKind,
			"spec": map[string]any{
				"schema": RecommendationSchema, "workload": "graph500", "objective": "cheapest",
				"dram_bytes": int64(4 << 30), "slow_bytes": int64(0), "llc_ways": int64(4), "slow_ratio": 0.0,
				"plan": []any{map[string]any{"tag": "edges", "fast_bytes": int64(2 << 30), "slow_bytes": int64(0)}},
			},
		}}
		u.SetName("graph500-cheapest-1a2b3c4d5e6f")
		u.SetUID(types.UID(uid))
		u.SetGeneration(generation)
		return u
	}
	placedFrom := func() *v1alpha1.PlanSource {
		t.Helper()
		ask, err := ReadPodWith(tieredPod("a", map[string]string{WorkloadAnnotation: "graph500"}, "1", "4Gi"), index)
		must(t, err)
		held := Reservation{Node: "node-a", VCPUs: 1, LLCMask: RunMask(0, 4), DRAMBytes: ask.DRAMBytes}
		ann, err := PlacementAnnotations(PlacementOf(ask, held))
		must(t, err)
		read, err := v1alpha1.ParsePlacement(ann)
		must(t, err)
		if read.PlanFrom == nil {
			t.Fatalf("placement %s names no object", ann[PlacementAnnotation])
		}
		return read.PlanFrom
	}
	old := object("0b7a8c1e-5f00-4c1d-9a2b-000000000001", 5)
	handler.OnAdd(old, false)
	if from := placedFrom(); from.Generation != 5 || from.UID == nil || *from.UID != string(old.GetUID()) {
		t.Fatalf("placed from %+v", from)
	}
	handler.OnDelete(old)
	made := object("0b7a8c1e-5f00-4c1d-9a2b-000000000002", 1)
	handler.OnAdd(made, false)
	if from := placedFrom(); from.Generation != 1 || from.UID == nil || *from.UID != string(made.GetUID()) {
		t.Fatalf("placed from %+v", from)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Until the operator turns it on (planByReference, --plan-by-reference), placements carry
// their plans (v2): a node whose tmc-nri does not read v3 yet still applies them.
func TestPlansAreCarriedUntilNamingIsOn(t *testing.T) {
	index := NewRecommendationIndex()
	index.SetAt("graph500-cheapest-1a2b3c4d5e6f", 7, map[string]any{
		"schema": RecommendationSchema, "workload": "graph500", "objective": "cheapest",
		"dram_bytes": 4 << 30, "slow_bytes": 0, "llc_ways": 4, "slow_ratio": 0.0,
		"plan": []any{map[string]any{"tag": "edges", "fast_bytes": 2 << 30, "slow_bytes": 0}},
	})
	ask, err := ReadPodWith(tieredPod("a", map[string]string{WorkloadAnnotation: "graph500"}, "1", "4Gi"), index)
	must(t, err)
	held := Reservation{Node: "node-a", VCPUs: 1, LLCMask: RunMask(0, 4), DRAMBytes: ask.DRAMBytes}
	ann, err := PlacementAnnotations(PlacementOf(ask, held))
	must(t, err)
	read, err := v1alpha1.ParsePlacement(ann)
	must(t, err)
	if read.Schema != PlacementSchema || read.PlanFrom != nil || len(read.Plan) != 1 {
		t.Fatalf("placement %s", ann[PlacementAnnotation])
	}
}
