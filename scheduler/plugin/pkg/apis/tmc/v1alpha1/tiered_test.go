package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// The label every reader shares (scheduler/conformance/tiered_pods.json): the Go rule names the
// table's label and value and concludes what each case says, as the publisher's does.
func TestTieredPodsAsTheSharedTableSays(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "..", "conformance", "tiered_pods.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Label    string `json:"label"`
		Value    string `json:"value"`
		Selector string `json:"selector"`
		Cases    []struct {
			Labels map[string]string `json:"labels"`
			Tiered bool              `json:"tiered"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Cases) == 0 {
		t.Fatalf("the table: %v", err)
	}
	if table.Label != TieredPodLabel || table.Value != TieredPodLabelValue {
		t.Fatalf("the table names %s=%s, the API types %s=%s", table.Label, table.Value, TieredPodLabel, TieredPodLabelValue)
	}
	if table.Selector != TieredPodSelector {
		t.Fatalf("the table's selector %q, the API types' %q", table.Selector, TieredPodSelector)
	}
	// The selector, as the API server reads it, selects exactly the pods IsTieredPod counts.
	selector, err := labels.Parse(TieredPodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range table.Cases {
		if got := IsTieredPod(c.Labels); got != c.Tiered {
			t.Errorf("%v: tiered %v, want %v", c.Labels, got, c.Tiered)
		}
		if got := selector.Matches(labels.Set(c.Labels)); got != c.Tiered {
			t.Errorf("%v: selected %v, want %v", c.Labels, got, c.Tiered)
		}
	}
}
