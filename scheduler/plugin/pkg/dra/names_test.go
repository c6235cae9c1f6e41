package dra

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The names a claim's allocation carries are read back by the publisher's feeder, in Python:
// both sides are held to one table (scheduler/conformance/dra_names.json).
func TestTheDRANamesAreTheSharedTables(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "dra_names.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Driver         string            `json:"driver"`
		RackPoolPrefix string            `json:"rack_pool_prefix"`
		Devices        map[string]string `json:"devices"`
		Capacities     map[string]string `json:"capacities"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	for what, pair := range map[string][2]string{
		"driver":           {table.Driver, DriverName},
		"rack pool prefix": {table.RackPoolPrefix, RackPoolPrefix},
		"ways device":      {table.Devices["ways"], DeviceWays},
		"DRAM device":      {table.Devices["dram"], DeviceDRAM},
		"slow device":      {table.Devices["slow"], DeviceSlow},
		"ways capacity":    {table.Capacities["ways"], CapacityWays},
		"bytes capacity":   {table.Capacities["bytes"], CapacityBytes},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s: the table says %q, pkg/dra %q", what, pair[0], pair[1])
		}
	}
}
