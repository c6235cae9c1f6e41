package tmc

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A published spec may carry Algorithm 1's other configurations within T (alternatives), which
// only a DRA claim template offers: the engine reads such a spec as it reads one without them
// and places the recommendation's own configuration, whether the spec is published or pinned.
func TestASpecWithAlternativesIsReadAsWithoutThem(t *testing.T) {
	withAlternatives := func() map[string]any {
		spec := graph500Spec(6)
		spec["alternatives"] = []any{
			map[string]any{"llc_ways": int64(12), "slow_ratio": 0.5, "dram_bytes": int64(2 << 30), "slow_bytes": int64(2 << 30)},
			map[string]any{"llc_ways": int64(4), "slow_ratio": 0.0, "dram_bytes": int64(4 << 30), "slow_bytes": int64(0)},
		}
		return spec
	}
	plain, offered := NewRecommendationIndex(), NewRecommendationIndex()
	plain.Set("graph500-slo", graph500Spec(6))
	offered.Set("graph500-slo", withAlternatives())
	annotations := map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%"}
	want, err := ReadPodWith(tieredPod("bfs", annotations, "2", "8Gi"), plain)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadPodWith(tieredPod("bfs", annotations, "2", "8Gi"), offered)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fallback != nil || got.LLCWays != 6 || !reflect.DeepEqual(got, want) {
		t.Fatalf("read with alternatives: %+v (fallback %v), without: %+v", got, got.Fallback, want)
	}

	pinned := func(spec map[string]any) *PodAsk {
		raw, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		pod := tieredPod("pinned", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%", RecommendationAnnotation: string(raw)}, "2", "8Gi")
		ask, err := ReadPodWith(pod, NewRecommendationIndex())
		if err != nil {
			t.Fatal(err)
		}
		return ask
	}
	if got, want := pinned(withAlternatives()), pinned(graph500Spec(6)); got.Fallback != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("pinned with alternatives: %+v (fallback %v), without: %+v", got, got.Fallback, want)
	}
}
