package tmc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fallback classes the publisher's metrics count (scheduler/conformance/fallback_reasons.json,
// which scheduler/metrics.py's table is held to): each class brought about here, its text holds
// the class's phrase and no phrase listed before it, so the first match names the right class.
func TestEveryFallbackReasonHoldsItsClassesPhrase(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "fallback_reasons.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Reasons []struct {
			Phrase string `json:"phrase"`
			Class  string `json:"class"`
		} `json:"reasons"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Reasons) == 0 {
		t.Fatalf("the table: %v", err)
	}
	index := NewRecommendationIndex()
	index.Set("none-cheapest", map[string]any{"schema": RecommendationSchema, "workload": "none", "objective": "cheapest", "fallback": "no usable profile"})
	pinned := `{"schema":"tmc.recommendation/v1","workload":"kv","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":2,"slow_ratio":0}`
	pods := map[string]map[string]string{
		"unpublished":           {WorkloadAnnotation: "graph500"},
		"no_configuration":      {WorkloadAnnotation: "none"},
		"no_workload":           {},
		"mismatched":            {WorkloadAnnotation: "bfs", RecommendationAnnotation: pinned},
		"annotations_too_large": {RecommendationAnnotation: `{"schema":"tmc.recommendation/v1","dram_bytes":1,"slow_bytes":0,"llc_ways":1,"slow_ratio":0}`, "example.com/blob": strings.Repeat("x", 150*1024)},
		"unreadable":            {RecommendationAnnotation: "{"},
	}
	for i, reason := range table.Reasons {
		ann, ok := pods[reason.Class]
		if !ok {
			t.Errorf("class %s: no case here brings it about", reason.Class)
			continue
		}
		ask, err := ReadPodWith(tieredPod("p-"+reason.Class, ann, "1", "1Gi"), index)
		if err != nil || ask.Fallback == nil {
			t.Errorf("class %s: no fallback (%+v, %v)", reason.Class, ask, err)
			continue
		}
		text := *ask.Fallback
		if !strings.Contains(text, reason.Phrase) {
			t.Errorf("class %s: %q does not hold %q", reason.Class, text, reason.Phrase)
		}
		for _, earlier := range table.Reasons[:i] {
			if strings.Contains(text, earlier.Phrase) {
				t.Errorf("class %s: %q holds the earlier class %s's phrase %q", reason.Class, text, earlier.Class, earlier.Phrase)
			}
		}
	}
	if len(table.Reasons) != len(pods) {
		t.Errorf("%d classes in the table, %d brought about here", len(table.Reasons), len(pods))
	}
}
