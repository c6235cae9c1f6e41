package tmcnri

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The placement verdicts the engine's tests and model.node_contract's read too
// (scheduler/conformance/placement-verdicts.json): the node concludes what they conclude,
// except where a case names the node's own verdict and says why.
var placementVerdictsPath = filepath.Join("..", "..", "..", "..", "scheduler", "conformance", "placement-verdicts.json")

func TestTheNodeReadsPlacementsAsTheTableSays(t *testing.T) {
	raw, err := os.ReadFile(placementVerdictsPath)
	must(t, err)
	var table struct {
		Schema string `json:"schema"`
		About  string `json:"about"`
		Cases  []struct {
			Name        string            `json:"name"`
			About       string            `json:"about"`
			Annotations map[string]string `json:"annotations"`
			PadTo       int               `json:"pad_to"`
			Verdict     string            `json:"verdict"`
			Node        string            `json:"node"`
			LLCMask     string            `json:"llc_mask"`
			Objective   string            `json:"objective"`
		} `json:"cases"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&table); err != nil || table.Schema != "tmc.placement-verdicts/v1" || len(table.Cases) == 0 {
		t.Fatalf("%s: %v (schema %q)", placementVerdictsPath, err, table.Schema)
	}
	for _, c := range table.Cases {
		ann := c.Annotations
		if raw := ann[PlacementAnnotation]; c.PadTo > len(raw) {
			ann[PlacementAnnotation] = raw + strings.Repeat(" ", c.PadTo-len(raw))
		}
		want := c.Verdict
		p, err := ParsePlacement(ann)
		got := "placed"
		var bad *MalformedError
		switch {
		case err != nil && !errors.As(err, &bad):
			t.Errorf("%s: %T, not a MalformedError", c.Name, err)
			got = "malformed"
		case err != nil:
			got = "malformed"
		case p == nil:
			got = "none"
		}
		if got != want {
			t.Errorf("%s: concluded %s, the table says %s (%v)", c.Name, got, want, err)
			continue
		}
		if got == "placed" && (p.Node != c.Node || p.LLCMask != c.LLCMask || (c.Objective != "" && p.Objective != c.Objective)) {
			t.Errorf("%s: read node %.20s mask %s objective %s", c.Name, p.Node, p.LLCMask, p.Objective)
		}
	}
}
