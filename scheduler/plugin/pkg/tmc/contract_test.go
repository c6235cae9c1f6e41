package tmc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

func TestParseNodeCapacity(t *testing.T) {
	labels := map[string]string{HostKindLabel: "optane"}
	ann := map[string]string{
		DRAMAnnotation: "68719476736", SlowAnnotation: "0", LLCWaysAnnotation: "11", CPUsAnnotation: "16",
		SlowPoolAnnotation: "rack-1", SlowPoolBytesAnnotation: "1099511627776",
	}
	c, err := ParseNodeCapacity(labels, ann)
	if err != nil {
		t.Fatal(err)
	}
	want := NodeCapacity{HostKind: "optane", CPUs: 16, DRAMBytes: 68719476736, LLCWays: 11, SlowPool: "rack-1", SlowPoolBytes: ptr(int64(1 << 40))}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got %+v, want %+v", *c, want)
	}

	// Not a tmc node: no DRAM or no ways published.
	for _, missing := range []string{DRAMAnnotation, LLCWaysAnnotation} {
		partial := map[string]string{DRAMAnnotation: "1", LLCWaysAnnotation: "1"}
		delete(partial, missing)
		if c, err := ParseNodeCapacity(nil, partial); c != nil || err != nil {
			t.Errorf("without %s: %+v, %v; want not a tmc node", missing, c, err)
		}
	}

	// Optional fields: no CPUs (allocatable counts), no slow tier, no pool bytes; the host kind
	// may come from an annotation when the label is missing.
	c, err = ParseNodeCapacity(nil, map[string]string{DRAMAnnotation: "1024", LLCWaysAnnotation: "4", SlowPoolAnnotation: "", HostKindLabel: "cxl"})
	if err != nil || c.CPUs != 0 || c.SlowBytes != 0 || c.SlowPool != "" || c.SlowPoolBytes != nil || c.HostKind != "cxl" {
		t.Errorf("optional fields: %+v, %v", c, err)
	}

	// Unreadable: each is a contract error, never a silently wrong number.
	for name, bad := range map[string]map[string]string{
		"negative":      {DRAMAnnotation: "-1", LLCWaysAnnotation: "4"},
		"not a number":  {DRAMAnnotation: "4GiB", LLCWaysAnnotation: "4"},
		"20 digits":     {DRAMAnnotation: "10000000000000000000", LLCWaysAnnotation: "4"},
		"2^52 bytes":    {DRAMAnnotation: "4503599627370496", LLCWaysAnnotation: "4"},
		"0 ways":        {DRAMAnnotation: "1", LLCWaysAnnotation: "0"},
		"65 ways":       {DRAMAnnotation: "1", LLCWaysAnnotation: "65"},
		"0 cpus":        {DRAMAnnotation: "1", LLCWaysAnnotation: "4", CPUsAnnotation: "0"},
		"4097 cpus":     {DRAMAnnotation: "1", LLCWaysAnnotation: "4", CPUsAnnotation: "4097"},
		"pool name":     {DRAMAnnotation: "1", LLCWaysAnnotation: "4", SlowPoolAnnotation: "Rack_1"},
		"unicode digit": {DRAMAnnotation: "١٢", LLCWaysAnnotation: "4"},
	} {
		c, err := ParseNodeCapacity(nil, bad)
		var ce *ContractError
		if c != nil || !errors.As(err, &ce) {
			t.Errorf("%s: %+v, %v; want a contract error", name, c, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// The expected strings are model.node_contract.Placement.to_annotations()'s output for the same
// placements: the plugin and the extender must write the same bytes.
func TestPlacementAnnotationIsPythons(t *testing.T) {
	cases := []struct {
		placement Placement
		python    string
	}{
		{
			Placement{
				Schema: PlacementSchema, Node: "node-a", Workload: ptr("graph500"), Objective: "slo:5%",
				Configuration: PlacedConfiguration{VCPUs: 4, DRAMBytes: 3 << 30, SlowBytes: 1 << 30, SlowRatio: 0.25, LLCWays: 3},
				LLCMask:       "0x38", SlowFromPool: true, RecommendationID: ptr("r-17"),
				Plan: []StructurePlan{{Tag: "bfs<frontier>", FastBytes: 1 << 30, SlowBytes: 1 << 29}},
			},
			`{"schema":"tmc.placement/v2","node":"node-a","workload":"graph500","objective":"slo:5%","configuration":{"vcpus":4,"dram_bytes":3221225472,"slow_bytes":1073741824,"slow_ratio":0.25,"llc_ways":3},"llc_mask":"0x38","slow_from_pool":true,"recommendation_id":"r-17","fallback":null,"plan":[{"tag":"bfs<frontier>","fast_bytes":1073741824,"slow_bytes":536870912}]}`,
		},
		{
			Placement{
				Schema: PlacementSchema, Node: "node-b", Objective: "cheapest",
				Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 4697620480, LLCWays: 11},
				LLCMask:       "0x7ff", Fallback: ptr("the pod carries no recommendation — café"),
			},
			`{"schema":"tmc.placement/v2","node":"node-b","workload":null,"objective":"cheapest","configuration":{"vcpus":1,"dram_bytes":4697620480,"slow_bytes":0,"slow_ratio":0.0,"llc_ways":11},"llc_mask":"0x7ff","slow_from_pool":false,"recommendation_id":null,"fallback":"the pod carries no recommendation \u2014 caf\u00e9","plan":[]}`,
		},
		{
			Placement{
				Schema: PlacementSchema, Node: "n", Objective: "cheapest",
				Configuration: PlacedConfiguration{VCPUs: 2, DRAMBytes: 1, SlowBytes: 2, SlowRatio: 1e-05, LLCWays: 1},
				LLCMask:       "0x1",
			},
			`{"schema":"tmc.placement/v2","node":"n","workload":null,"objective":"cheapest","configuration":{"vcpus":2,"dram_bytes":1,"slow_bytes":2,"slow_ratio":1e-05,"llc_ways":1},"llc_mask":"0x1","slow_from_pool":false,"recommendation_id":null,"fallback":null,"plan":[]}`,
		},
		{
			// The plan named where it is published (tmc.placement/v3).
			Placement{
				Schema: PlacementSchemaV3, Node: "node-a", Workload: ptr("graph500"), Objective: "cheapest",
				Configuration: PlacedConfiguration{VCPUs: 2, DRAMBytes: 3 << 30, SlowBytes: 1 << 30, SlowRatio: 0.25, LLCWays: 4},
				LLCMask:       "0x3c", RecommendationID: ptr("r-18"),
				PlanFrom: &PlanSource{Recommendation: "graph500-cheapest-1a2b3c4d5e6f", Generation: 7},
			},
			`{"schema":"tmc.placement/v3","node":"node-a","workload":"graph500","objective":"cheapest","configuration":{"vcpus":2,"dram_bytes":3221225472,"slow_bytes":1073741824,"slow_ratio":0.25,"llc_ways":4},"llc_mask":"0x3c","slow_from_pool":false,"recommendation_id":"r-18","fallback":null,"plan":[],"plan_from":{"recommendation":"graph500-cheapest-1a2b3c4d5e6f","generation":7}}`,
		},
		{
			// A pod that requests no memory, placed at its recommendation's own bytes.
			Placement{
				Schema: PlacementSchema, Node: "node-a", Workload: ptr("stream"), Objective: "cheapest",
				Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 24 << 20, SlowBytes: 8 << 20, SlowRatio: 0.25, LLCWays: 3},
				LLCMask:       "0x7", RecommendationID: ptr("r-1"), SizedFrom: ptr(v1alpha1.SizedFromRecommendation),
			},
			`{"schema":"tmc.placement/v2","node":"node-a","workload":"stream","objective":"cheapest","configuration":{"vcpus":1,"dram_bytes":25165824,"slow_bytes":8388608,"slow_ratio":0.25,"llc_ways":3},"llc_mask":"0x7","slow_from_pool":false,"recommendation_id":"r-1","fallback":null,"plan":[],"sized_from":"recommendation"}`,
		},
	}
	for i, c := range cases {
		ann, err := PlacementAnnotations(&c.placement)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if ann[PlacementAnnotation] != c.python {
			t.Errorf("case %d:\n got %s\nwant %s", i, ann[PlacementAnnotation], c.python)
		}
		if ann[LLCMaskAnnotation] != c.placement.LLCMask {
			t.Errorf("case %d: mask annotation %q", i, ann[LLCMaskAnnotation])
		}
		back, err := ParsePlacement(ann)
		if err != nil {
			t.Fatalf("case %d: reading back: %v", i, err)
		}
		again, _ := PlacementAnnotations(back)
		if again[PlacementAnnotation] != c.python {
			t.Errorf("case %d: not stable through a read: %s", i, again[PlacementAnnotation])
		}
	}
}

func TestParsePlacementRefusesWhatPythonRefuses(t *testing.T) {
	good := `{"schema":"tmc.placement/v2","node":"n","configuration":{"vcpus":2,"dram_bytes":8,"slow_bytes":4,"slow_ratio":0.5,"llc_ways":2},"llc_mask":"0x6"}`
	p, err := ParsePlacement(map[string]string{PlacementAnnotation: good, LLCMaskAnnotation: "0x6"})
	if err != nil || p.Objective != "cheapest" || p.LLCMaskBits() != 6 {
		t.Fatalf("a minimal v2 placement: %+v, %v", p, err)
	}
	v1 := strings.Replace(good, "v2", "v1", 1)
	if _, err := ParsePlacement(map[string]string{PlacementAnnotation: v1}); err != nil {
		t.Errorf("a v1 placement (older extender) is read: %v", err)
	}
	if p, err := ParsePlacement(map[string]string{}); p != nil || err != nil {
		t.Errorf("no placement: %+v, %v", p, err)
	}
	for name, ann := range map[string]map[string]string{
		"mask with a hole":      {PlacementAnnotation: strings.Replace(good, `"0x6"`, `"0x5"`, 1)},
		"mask and ways":         {PlacementAnnotation: strings.Replace(good, `"0x6"`, `"0xe"`, 1)},
		"side mask disagrees":   {PlacementAnnotation: good, LLCMaskAnnotation: "0x3"},
		"unknown field":         {PlacementAnnotation: strings.Replace(good, `"node"`, `"extra":1,"node"`, 1)},
		"unknown schema":        {PlacementAnnotation: strings.Replace(good, "v2", "v9", 1)},
		"ratio above 1":         {PlacementAnnotation: strings.Replace(good, `0.5`, `1.5`, 1)},
		"no vcpus":              {PlacementAnnotation: strings.Replace(good, `"vcpus":2`, `"vcpus":0`, 1)},
		"not JSON":              {PlacementAnnotation: "{"},
		"plan above the config": {PlacementAnnotation: strings.Replace(good, `"llc_mask":"0x6"`, `"llc_mask":"0x6","plan":[{"tag":"a","fast_bytes":9,"slow_bytes":0}]`, 1)},
		"tag with a space":      {PlacementAnnotation: strings.Replace(good, `"llc_mask":"0x6"`, `"llc_mask":"0x6","plan":[{"tag":"a b","fast_bytes":1,"slow_bytes":0}]`, 1)},
		"over 256 KiB":          {PlacementAnnotation: good + strings.Repeat(" ", 256*1024)},
	} {
		if p, err := ParsePlacement(ann); err == nil {
			t.Errorf("%s: read as %+v", name, p)
		}
	}
}

func TestPyFloatIsPythonsRepr(t *testing.T) {
	for v, want := range map[float64]string{0: "0.0", 1: "1.0", 0.25: "0.25", 0.1: "0.1", 1e-05: "1e-05", 0.0001: "0.0001", 1.0 / 3: "0.3333333333333333"} {
		got, err := PyFloat(v).MarshalJSON()
		if err != nil || string(got) != want {
			t.Errorf("%v: %s, %v; Python writes %s", v, got, err, want)
		}
	}
}

// The bounds' cases shared with the Python contract (scheduler/conformance/contract_bounds.json).
func TestContractBoundsAgreeWithPython(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "contract_bounds.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		MaxPlacementAnnotationsBytes int `json:"max_placement_annotations_bytes"`
		Cases                        []struct {
			Name       string `json:"name"`
			Structures int    `json:"structures"`
			FastBytes  int64  `json:"fast_bytes"`
			DRAMBytes  int64  `json:"dram_bytes"`
			Readable   bool   `json:"readable"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Cases) == 0 {
		t.Fatalf("the table: %v", err)
	}
	if table.MaxPlacementAnnotationsBytes != MaxPlacementAnnotationsBytes {
		t.Errorf("the shared bound on a Binding's annotations is %d, the engine's %d", table.MaxPlacementAnnotationsBytes, MaxPlacementAnnotationsBytes)
	}
	for _, c := range table.Cases {
		plan := make([]string, c.Structures)
		for i := range plan {
			plan[i] = fmt.Sprintf(`{"tag":"s%d","fast_bytes":%d,"slow_bytes":0}`, i, c.FastBytes)
		}
		text := fmt.Sprintf(`{"schema":"tmc.placement/v2","node":"n","configuration":{"vcpus":1,"dram_bytes":%d,"slow_bytes":0,"slow_ratio":0.0,"llc_ways":1},"llc_mask":"0x1","plan":[%s]}`,
			c.DRAMBytes, strings.Join(plan, ","))
		_, err := ParsePlacement(map[string]string{PlacementAnnotation: text})
		if (err == nil) != c.Readable {
			t.Errorf("%s: readable %v, want %v (%v)", c.Name, err == nil, c.Readable, err)
		}
	}
}
