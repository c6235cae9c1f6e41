package tmc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// The node table shared with the mirror's parser (scheduler/conformance/nodes.json, read by
// tests/scheduler/test_nodes_golden.py with scheduler.feeder.node_capacity): what the engine reads
// of each Node object, its tiered capacity, CPUs and readiness, must be what the table says.
func TestParseNodeAgreesWithTheNodeTable(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	type capacity struct {
		HostKind      string  `json:"host_kind"`
		CPUs          int64   `json:"cpus"`
		DRAMBytes     int64   `json:"dram_bytes"`
		SlowBytes     int64   `json:"slow_bytes"`
		LLCWays       int     `json:"llc_ways"`
		SlowPool      *string `json:"slow_pool"`
		SlowPoolBytes *int64  `json:"slow_pool_bytes"`
	}
	var table struct {
		Cases []struct {
			Name   string  `json:"name"`
			Node   v1.Node `json:"node"`
			Expect struct {
				Parse    string    `json:"parse"`
				Ready    bool      `json:"ready"`
				Capacity *capacity `json:"capacity"`
			} `json:"expect"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Cases) == 0 {
		t.Fatalf("the table: %v", err)
	}
	for _, c := range table.Cases {
		p := parseNode(&c.Node)
		if p.ready != c.Expect.Ready {
			t.Errorf("%s: ready %v, want %v", c.Name, p.ready, c.Expect.Ready)
		}
		got := "capacity"
		switch {
		case p.err != nil:
			got = "unreadable"
		case p.capacity == nil:
			got = "not-tmc"
		}
		if got != c.Expect.Parse {
			t.Errorf("%s: read as %s (%v), want %s", c.Name, got, p.err, c.Expect.Parse)
			continue
		}
		if got != "capacity" {
			continue
		}
		if c.Expect.Capacity == nil {
			t.Fatalf("%s: the table gives no capacity", c.Name)
		}
		have := capacity{
			HostKind: p.capacity.HostKind, CPUs: p.cpus, DRAMBytes: p.capacity.DRAMBytes,
			SlowBytes: p.capacity.SlowBytes, LLCWays: p.capacity.LLCWays, SlowPoolBytes: p.capacity.SlowPoolBytes,
		}
		if p.capacity.SlowPool != "" {
			have.SlowPool = &p.capacity.SlowPool
		}
		if jsonText(have) != jsonText(*c.Expect.Capacity) {
			t.Errorf("%s: read %s, want %s", c.Name, jsonText(have), jsonText(*c.Expect.Capacity))
		}
	}
}

func jsonText(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}
