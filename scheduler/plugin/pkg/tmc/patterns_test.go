package tmc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// scheduler/conformance/patterns.json holds the answers of model/node_contract.py and
// model/patterns.py (tests/model/test_patterns.py checks that they still are): which pattern
// annotations are readable, each node's preference for a pod, and the combined scores.
type patternCases struct {
	About       string          `json:"about"`
	Pattern     json.RawMessage `json:"pattern"`
	Annotations []struct {
		Text  string `json:"text"`
		Valid bool   `json:"valid"`
		Slots int    `json:"slots"`
	} `json:"annotations"`
	Preferences []struct {
		Placed  [][5]json.RawMessage `json:"placed"`
		Pod     [4]json.RawMessage   `json:"pod"`
		Want    int                  `json:"want"`
		PerSlot []int                `json:"per_slot"`
	} `json:"preferences"`
	Combine []struct {
		Preferences []int `json:"preferences"`
		Packing     []int `json:"packing"`
		Want        []int `json:"want"`
	} `json:"combine"`
}

func loadPatternCases(t *testing.T) patternCases {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "patterns.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases patternCases
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func placedKey(t *testing.T, parts []json.RawMessage) PlacedKey {
	t.Helper()
	var k PlacedKey
	for i, dst := range []any{&k.Workload, &k.DRAMBytes, &k.SlowBytes, &k.LLCWays} {
		if err := json.Unmarshal(parts[i], dst); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func TestPatternAnnotationsAsTheModelReadsThem(t *testing.T) {
	cases := loadPatternCases(t)
	valid := 0
	for _, a := range cases.Annotations {
		p, err := ParsePattern(map[string]string{PatternAnnotation: a.Text})
		if (err == nil) != a.Valid {
			t.Errorf("%.80s: error %v, the model says valid=%v", a.Text, err, a.Valid)
			continue
		}
		if a.Valid {
			valid++
			if p == nil || len(p.Slots) != a.Slots {
				t.Errorf("%.80s: %+v, want %d slots", a.Text, p, a.Slots)
			}
		}
	}
	if valid < 5 || len(cases.Annotations)-valid < 25 {
		t.Errorf("%d valid of %d annotations: too few of one kind", valid, len(cases.Annotations))
	}
	if p, err := ParsePattern(map[string]string{}); p != nil || err != nil {
		t.Errorf("no annotation: %v, %v", p, err)
	}
}

func TestPreferenceAndCombineAsTheModel(t *testing.T) {
	cases := loadPatternCases(t)
	pattern, err := ParsePattern(map[string]string{PatternAnnotation: string(cases.Pattern)})
	if err != nil {
		t.Fatal(err)
	}
	levels := map[int]int{}
	for i, c := range cases.Preferences {
		placed := map[PlacedKey]int{}
		for _, p := range c.Placed {
			var n int
			if err := json.Unmarshal(p[4], &n); err != nil {
				t.Fatal(err)
			}
			placed[placedKey(t, p[:4])] = n
		}
		pod := placedKey(t, c.Pod[:])
		if got := Preference(pattern, placed, &pod); got != c.Want {
			t.Errorf("case %d: preference %d, the model's %d (placed %v, pod %+v)", i, got, c.Want, placed, pod)
		}
		levels[c.Want]++
	}
	if levels[PreferNone] < 5 || levels[PreferWorkload] < 5 || levels[PreferExact] < 5 {
		t.Errorf("levels exercised: %v", levels)
	}
	if Preference(nil, nil, &PlacedKey{Workload: "a"}) != PreferNone || Preference(pattern, nil, nil) != PreferNone {
		t.Error("no pattern or no workload must be PreferNone")
	}
	for i, c := range cases.Combine {
		if got := Combine(c.Preferences, c.Packing); !reflect.DeepEqual(got, c.Want) {
			t.Errorf("combine case %d: %v, the model's %v", i, got, c.Want)
		}
	}
}

// The cache counts bound pods per node, workload and configuration, and releases them.
func TestCacheCountsPodsAgainstTheNodesPattern(t *testing.T) {
	pattern := &NodePattern{Schema: PatternSchema, Plan: "p", Slots: []PatternSlot{{Workload: "a", DRAMBytes: 4, LLCWays: 2, Count: 1}}}
	c := NewCache()
	a := "a"
	exact := &PlacedKey{Workload: "a", DRAMBytes: 4, LLCWays: 2}
	if got := c.Preference("n1", pattern, exact); got != PreferExact {
		t.Fatalf("empty node: %d", got)
	}
	c.Bind("u1", &Placement{Schema: PlacementSchema, Node: "n1", Workload: &a, Objective: "cheapest",
		Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 4, LLCWays: 2}, LLCMask: "0x3"})
	if got := c.Preference("n1", pattern, exact); got != PreferNone {
		t.Errorf("the slot is taken: %d", got)
	}
	if got := c.Preference("n2", pattern, exact); got != PreferExact {
		t.Errorf("another node: %d", got)
	}
	c.Release("u1")
	if got := c.Preference("n1", pattern, exact); got != PreferExact {
		t.Errorf("released: %d", got)
	}
}
