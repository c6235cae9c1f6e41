package tmc

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Every fallback reason code the engine declares (v1alpha1.FallbackReasons, which the contract's
// JSON Schema lists for the publisher's metrics) is brought about here, written into the pod's
// placement beside its text, and read back by the one placement reader; no fallback goes
// without a code.
func TestEveryFallbackReasonIsBroughtAboutAndCarriedByThePlacement(t *testing.T) {
	index := NewRecommendationIndex()
	index.Set("none-cheapest", map[string]any{"schema": RecommendationSchema, "workload": "none", "objective": "cheapest", "fallback": "no usable profile"})
	pinned := `{"schema":"tmc.recommendation/v1","workload":"kv","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":2,"slow_ratio":0}`
	var long strings.Builder
	for i := range 600 {
		if i > 0 {
			long.WriteString(",")
		}
		fmt.Fprintf(&long, `{"tag":"%s%04d","fast_bytes":1024,"slow_bytes":0}`, strings.Repeat("t", 100), i)
	}
	tooLarge := `{"schema":"tmc.recommendation/v1","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":1,"slow_ratio":0,"plan":[` + long.String() + `]}`
	pods := map[v1alpha1.FallbackReason]map[string]string{
		v1alpha1.FallbackUnpublished:         {WorkloadAnnotation: "graph500"},
		v1alpha1.FallbackNoConfiguration:     {WorkloadAnnotation: "none"},
		v1alpha1.FallbackNoWorkload:          {},
		v1alpha1.FallbackMismatched:          {WorkloadAnnotation: "bfs", RecommendationAnnotation: pinned},
		v1alpha1.FallbackAnnotationsTooLarge: {RecommendationAnnotation: `{"schema":"tmc.recommendation/v1","dram_bytes":1,"slow_bytes":0,"llc_ways":1,"slow_ratio":0}`, "example.com/blob": strings.Repeat("x", 150*1024)},
		v1alpha1.FallbackUnreadable:          {RecommendationAnnotation: "{"},
		v1alpha1.FallbackPlacementTooLarge:   {RecommendationAnnotation: tooLarge},
	}
	for _, code := range v1alpha1.FallbackReasons {
		ann, ok := pods[code]
		if !ok {
			t.Errorf("%s: no case here brings it about", code)
			continue
		}
		ask, err := ReadPodWith(tieredPod("p-"+strings.ToLower(string(code)), ann, "1", "1Gi"), index)
		if err != nil || ask.Fallback == nil {
			t.Errorf("%s: no fallback (%+v, %v)", code, ask, err)
			continue
		}
		if ask.FallbackReason != code {
			t.Errorf("%s: coded %q (%s)", code, ask.FallbackReason, *ask.Fallback)
		}
		placement := PlacementOf(ask, Reservation{Node: "n1", VCPUs: ask.VCPUs, DRAMBytes: ask.DRAMBytes, LLCMask: 0x1})
		written, err := PlacementAnnotations(placement)
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		read, err := ParsePlacement(written)
		if err != nil || read == nil || read.FallbackReason != code || read.Fallback == nil {
			t.Errorf("%s: read back as %+v (%v)", code, read, err)
		}
	}
	if len(pods) != len(v1alpha1.FallbackReasons) {
		t.Errorf("%d cases here, %d codes declared", len(pods), len(v1alpha1.FallbackReasons))
	}
	if sorted := slices.Sorted(slices.Values(v1alpha1.FallbackReasons)); len(slices.Compact(sorted)) != len(sorted) {
		t.Errorf("a code is declared twice: %v", v1alpha1.FallbackReasons)
	}
}

// A recommendation carries no code: the placement of a pod given one has none.
func TestARecommendedPlacementCarriesNoFallbackReason(t *testing.T) {
	pinned := `{"schema":"tmc.recommendation/v1","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":2,"slow_ratio":0}`
	ask, err := ReadPodWith(tieredPod("p", map[string]string{RecommendationAnnotation: pinned}, "1", "1Gi"), NewRecommendationIndex())
	if err != nil || ask.Fallback != nil || ask.FallbackReason != "" {
		t.Fatalf("%+v, %v", ask, err)
	}
	written, err := PlacementAnnotations(PlacementOf(ask, Reservation{Node: "n1", VCPUs: 1, DRAMBytes: ask.DRAMBytes, LLCMask: 0x3}))
	if err != nil || strings.Contains(written[PlacementAnnotation], "fallback_reason") {
		t.Fatalf("%v: %v", written, err)
	}
}
