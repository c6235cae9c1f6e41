package tmc

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// The placement verdicts (scheduler/conformance/placement-verdicts.json) are shared with the
// node's tests and model.node_contract's: every reader of a placement concludes the same.
var placementVerdictsPath = filepath.Join("..", "..", "..", "conformance", "placement-verdicts.json")

type placementVerdict struct {
	Name        string            `json:"name"`
	About       string            `json:"about"`
	Annotations map[string]string `json:"annotations"`
	PadTo       int               `json:"pad_to"`
	Verdict     string            `json:"verdict"`
	Node        string            `json:"node"`
	LLCMask     string            `json:"llc_mask"`
	Objective   string            `json:"objective"`
}

func readPlacementVerdicts(t *testing.T) []placementVerdict {
	t.Helper()
	raw, err := os.ReadFile(placementVerdictsPath)
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Schema string             `json:"schema"`
		About  string             `json:"about"`
		Cases  []placementVerdict `json:"cases"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&table); err != nil || table.Schema != "tmc.placement-verdicts/v1" || len(table.Cases) == 0 {
		t.Fatalf("%s: %v (schema %q)", placementVerdictsPath, err, table.Schema)
	}
	for i := range table.Cases {
		c := &table.Cases[i]
		if raw := c.Annotations[PlacementAnnotation]; c.PadTo > len(raw) {
			c.Annotations[PlacementAnnotation] = raw + strings.Repeat(" ", c.PadTo-len(raw))
		}
	}
	return table.Cases
}

// verdictMismatch says how a reader's conclusion differs from want ("" when it does not).
func verdictMismatch(c placementVerdict, want string, p *Placement, err error) string {
	got := "placed"
	switch {
	case err != nil:
		got = "malformed"
	case p == nil:
		got = "none"
	}
	if got != want {
		return "concluded " + got + ", the table says " + want + " (" + errString(err) + ")"
	}
	if got == "placed" && (p.Node != c.Node || p.LLCMask != c.LLCMask || (c.Objective != "" && p.Objective != c.Objective)) {
		return "read node " + p.Node[:min(len(p.Node), 20)] + " mask " + p.LLCMask + " objective " + p.Objective
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func TestTheEngineReadsPlacementsAsTheTableSays(t *testing.T) {
	for _, c := range readPlacementVerdicts(t) {
		p, err := ParsePlacement(c.Annotations)
		if why := verdictMismatch(c, c.Verdict, p, err); why != "" {
			t.Errorf("%s: %s", c.Name, why)
		}
		var ce *ContractError
		if err != nil && !errors.As(err, &ce) {
			t.Errorf("%s: %T, not a ContractError", c.Name, err)
		}
	}
}

// The table catches a reader that drifts: each of the readers the engine and the node had
// before they shared one (trailing JSON accepted; an empty placement malformed; no bounds on
// the names' lengths), and the shared one before it refused a stray ']' or '}' after the object
// (it asked json.Decoder.More, which sees no further value there), concludes otherwise on some
// case.
func TestThePlacementTableCatchesADriftingReader(t *testing.T) {
	cases := readPlacementVerdicts(t)
	drifted := map[string]func(map[string]string) (*Placement, error){
		"trailing JSON accepted": func(ann map[string]string) (*Placement, error) {
			var first json.RawMessage
			if err := json.NewDecoder(strings.NewReader(ann[PlacementAnnotation])).Decode(&first); err == nil {
				ann = map[string]string{PlacementAnnotation: string(first)}
			}
			return v1alpha1.ParsePlacement(ann)
		},
		"a stray ] or } accepted": func(ann map[string]string) (*Placement, error) {
			dec := json.NewDecoder(strings.NewReader(ann[PlacementAnnotation]))
			var first json.RawMessage
			if dec.Decode(&first) == nil && !dec.More() {
				ann = maps.Clone(ann)
				ann[PlacementAnnotation] = string(first)
			}
			return v1alpha1.ParsePlacement(ann)
		},
		"an empty placement malformed": func(ann map[string]string) (*Placement, error) {
			if raw, ok := ann[PlacementAnnotation]; ok && raw == "" {
				return nil, errors.New("empty")
			}
			return v1alpha1.ParsePlacement(ann)
		},
		"names unbounded": func(ann map[string]string) (*Placement, error) {
			p, err := v1alpha1.ParsePlacement(ann)
			if err != nil && strings.Contains(err.Error(), "longer than") {
				return &Placement{}, nil
			}
			return p, err
		},
	}
	for name, read := range drifted {
		caught := false
		for _, c := range cases {
			p, err := read(c.Annotations)
			if verdictMismatch(c, c.Verdict, p, err) != "" {
				caught = true
				break
			}
		}
		if !caught {
			t.Errorf("a reader with %s passes the table", name)
		}
	}
}
