package tmc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The cases shared with the publisher (tests/scheduler/test_objectives_canonical.py).
func TestCanonicalObjectiveAgreesWithPython(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "objectives.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []struct {
			Given     string  `json:"given"`
			Canonical *string `json:"canonical"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Cases) == 0 {
		t.Fatalf("the table: %v", err)
	}
	for _, c := range table.Cases {
		got, ok := CanonicalObjective(c.Given)
		want := c.Given
		if c.Canonical != nil {
			want = *c.Canonical
		}
		if got != want || ok != (c.Canonical != nil) {
			t.Errorf("%q: %q %v, want %q %v", c.Given, got, ok, want, c.Canonical != nil)
		}
	}
}

func TestPodsOfOneObjectiveSpelledTwoWaysShareAPublishedRecommendation(t *testing.T) {
	published := NewRecommendationIndex()
	published.Set("graph500-slo-5", map[string]any{
		"schema": RecommendationSchema, "workload": "graph500", "objective": "slo:5%",
		"dram_bytes": 1 << 30, "slow_bytes": 0, "llc_ways": 2, "slow_ratio": 0.0,
	})
	for _, spelled := range []string{"slo:5%", "slo:5.000%", "slo:05%"} {
		ask, err := ReadPodWith(tieredPod("p", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: spelled}, "1", "1Gi"), published)
		if err != nil {
			t.Fatal(err)
		}
		if ask.Fallback != nil || ask.Objective != "slo:5%" || ask.LLCWays != 2 {
			t.Errorf("%s: objective %q, fallback %v", spelled, ask.Objective, ask.Fallback)
		}
	}
}
