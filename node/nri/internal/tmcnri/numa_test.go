package tmcnri

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseListIsBounded(t *testing.T) {
	got, err := ParseList("0-2,8,10-11,2")
	must(t, err)
	if !reflect.DeepEqual(got, []int{0, 1, 2, 8, 10, 11}) || FormatList(got) != "0-2,8,10-11" {
		t.Errorf("%v %q", got, FormatList(got))
	}
	for _, bad := range []string{"0-999999999", "x", "3-1", "-1", "1-", strings.Repeat("1,", 5000) + "1"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("%q accepted", bad[:min(len(bad), 20)])
		}
	}
}

func TestNearestSlowNodeByDistance(t *testing.T) {
	topo, err := ReadTopology(twoSockets(t))
	must(t, err)
	dram, slow := topo.Capacity()
	if dram != 32*gib || slow != 128*gib {
		t.Errorf("capacity %d %d", dram, slow)
	}
	for cpus, want := range map[string]struct {
		dram []int
		slow int
	}{
		"0-1": {[]int{0}, 2},
		"3":   {[]int{1}, 3},
		"":    {[]int{0, 1}, 2}, // all CPUs: the slow node nearest both (24 < 26 either way; lower id)
		"1-2": {[]int{0, 1}, 2},
	} {
		list, _ := ParseList(cpus)
		d, s := topo.Nearest(list)
		if !reflect.DeepEqual(d, want.dram) || s != want.slow {
			t.Errorf("cpus %q: dram %v slow %d, want %v %d", cpus, d, s, want.dram, want.slow)
		}
	}
	// A memory tier marks a slow node that has CPUs (the kernel's memory_tiering).
	root := writeSysfs(t, []fakeNode{{"0", 1 << 20, "10 20"}, {"1", 1 << 20, "20 10"}})
	for tier, node := range map[string]string{"memory_tier4": "0", "memory_tier22": "1"} {
		d := filepath.Join(root, "devices", "virtual", "memory_tiering", tier)
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "nodelist"), []byte(node+"\n"), 0o644))
	}
	topo, err = ReadTopology(root)
	must(t, err)
	if d, s := topo.Nearest(nil); !reflect.DeepEqual(d, []int{0}) || s != 1 {
		t.Errorf("tiered: %v %d", d, s)
	}
	// A corrupt distance row is an error, not a panic.
	bad := writeSysfs(t, []fakeNode{{"0", 1 << 20, "10 x"}})
	if _, err := ReadTopology(bad); err == nil {
		t.Error("corrupt distance accepted")
	}
}

// The plan file has one grammar and two renderers (this one and model/node_contract.py's):
// both are held to the same golden files (tests/fixtures/plans), which the shim's own parser
// reads too (profiler-agent/alloc/tests/test_plan.c, run on every one of them by
// tests/agent/test_plan_golden.py).
func TestRenderPlanMatchesTheGoldenFiles(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "tests", "fixtures", "plans")
	cases, err := filepath.Glob(filepath.Join(dir, "*.json"))
	must(t, err)
	if len(cases) == 0 {
		t.Fatal("no golden plan files")
	}
	for _, path := range cases {
		var c struct {
			Placement json.RawMessage `json:"placement"`
			FastNode  int             `json:"fast_node"`
			SlowNode  int             `json:"slow_node"`
			Who       string          `json:"who"`
		}
		data, err := os.ReadFile(path)
		must(t, err)
		must(t, json.Unmarshal(data, &c))
		p, err := ParsePlacement(map[string]string{PlacementAnnotation: string(c.Placement)})
		must(t, err)
		want, err := os.ReadFile(strings.TrimSuffix(path, ".json") + ".plan")
		must(t, err)
		if got := RenderPlan(p, c.FastNode, c.SlowNode, c.Who); got != string(want) {
			t.Errorf("%s:\n%s\nwant\n%s", filepath.Base(path), got, want)
		}
	}
}

func TestResctrlInfoAndSchemata(t *testing.T) {
	r := &Resctrl{Root: writeResctrl(t)}
	cat, err := r.Info()
	must(t, err)
	if s, err := cat.Schemata(0x7f0); err != nil || s != "L3:0=7f0;1=7f0" {
		t.Errorf("%q %v", s, err)
	}
	for _, bad := range []uint64{0, 0x5, 0x800} {
		if _, err := cat.Schemata(bad); err == nil {
			t.Errorf("%#x accepted", bad)
		}
	}
	if _, err := (&Resctrl{Root: t.TempDir()}).Info(); err != ErrNoCAT {
		t.Errorf("empty tree: %v", err)
	}
	var none *Resctrl
	if _, err := none.Info(); err != ErrNoCAT {
		t.Errorf("nil: %v", err)
	}
}
