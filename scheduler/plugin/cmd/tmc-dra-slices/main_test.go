package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestItPrintsAListOfSlicesAndRefusesWhatItCannotRead(t *testing.T) {
	var out bytes.Buffer
	in := `{"nodes": [{"name": "node-a", "capacity": {"dram_bytes": 1073741824, "llc_ways": 4}}], "generation": 2}`
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind string `json:"kind"`
			Spec struct {
				Pool struct {
					Generation int64 `json:"generation"`
				} `json:"pool"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	// One slice: the way device and DRAM.
	if list.Kind != "List" || len(list.Items) != 1 || list.Items[0].Kind != "ResourceSlice" || list.Items[0].Spec.Pool.Generation != 2 {
		t.Fatalf("%s", out.String())
	}
	for _, bad := range []string{
		`{"nodes": [{"name": "node-a", "capacity": {"llc_ways": 4, "surprise": 1}}]}`,
		`{"nodes": [{"name": "node-a", "capacity": {"llc_ways": 65}}]}`,
		`{"nodes": [{"name": "node-a", "capacity": {"llc_ways": 4, "dram_bytes": 1e300}}]}`,
		`{"rack_pools": {"rack-a": -1}}`,
		`{"nodes": [], "way_counts": [4]}`,
		`{"nodes": [` + strings.Repeat(" ", 1<<20) + `]}`,
		`not json`,
	} {
		if err := run(strings.NewReader(bad), &bytes.Buffer{}); err == nil {
			t.Errorf("accepted %.60q", bad)
		}
	}
}

func TestWithClaimItPrintsTheClaimOfTheAlternativesAndRefusesWhatItCannotRead(t *testing.T) {
	var out bytes.Buffer
	in := `{"alternatives": [{"llc_ways": 12, "dram_bytes": 4294967296, "slow_bytes": 1073741824}, {"llc_ways": 4, "dram_bytes": 5368709120}]}`
	if err := claim(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Devices struct {
			Requests []struct {
				Name           string `json:"name"`
				FirstAvailable []struct {
					Name string `json:"name"`
				} `json:"firstAvailable"`
			} `json:"requests"`
			Constraints []struct {
				Requests []string `json:"requests"`
			} `json:"constraints"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(out.Bytes(), &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices.Requests) != 3 || len(spec.Devices.Requests[2].FirstAvailable) != 2 || len(spec.Devices.Constraints) != 4 {
		t.Fatalf("%s", out.String())
	}
	for _, bad := range []string{
		`{"alternatives": []}`,
		`{"alternatives": [{"llc_ways": 4, "dram_bytes": 1, "surprise": 1}]}`,
		`{"alternatives": [{"llc_ways": 4, "dram_bytes": 1e300}]}`,
		`{"alternatives": [{"llc_ways": 0, "dram_bytes": 1}]}`,
		`not json`,
	} {
		if err := claim(strings.NewReader(bad), &bytes.Buffer{}); err == nil {
			t.Errorf("accepted %.60q", bad)
		}
	}
}
