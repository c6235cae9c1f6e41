package v1alpha1

import (
	"strings"
	"testing"
)

const placedText = `{"schema":"tmc.placement/v2","node":"node-a","workload":null,"objective":"slo:5%",` +
	`"configuration":{"vcpus":2,"dram_bytes":3221225472,"slow_bytes":1073741824,"slow_ratio":0.25,"llc_ways":4},` +
	`"llc_mask":"0xf0","slow_from_pool":false,"recommendation_id":"rec-1","fallback":null,` +
	`"plan":[{"tag":"graph","fast_bytes":2147483648,"slow_bytes":1073741824}]}`

// The verdict table (scheduler/conformance/placement-verdicts.json) holds refuseUnwritten to
// model.node_contract's verdicts; here, that it names the null it refuses, and that it costs a
// bound pod's events no allocation.
func TestRefuseUnwrittenNamesTheNull(t *testing.T) {
	for raw, want := range map[string]string{
		strings.Replace(placedText, `"fast_bytes":2147483648`, `"fast_bytes":null`, 1): "plan[].fast_bytes: never null",
		strings.Replace(placedText, `"slow_ratio":0.25`, `"slow_ratio":null`, 1):       "configuration.slow_ratio: never null",
		strings.Replace(placedText, `"plan":[{`, `"plan":[null,{`, 1):                  "plan[]: never null",
		`null`: "the placement: never null",
	} {
		if err := refuseUnwritten(raw); err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%s: %v, want ...%s", raw, err, want)
		}
	}
	if err := refuseUnwritten(placedText); err != nil {
		t.Errorf("a placement with null workload and fallback: %v", err)
	}
}

func TestRefuseUnwrittenAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = refuseUnwritten(placedText) }); n != 0 {
		t.Errorf("%v allocations for one placement, want none", n)
	}
}

// Every object of a placement has fewer fields than the keys the scan keeps per object, so that
// only a repeated key can reach the bound.
func TestThePlacementScanKeepsMoreKeysThanAnObjectHasFields(t *testing.T) {
	for object, fields := range placementFields {
		if len(fields) >= maxPlacementObjectKeys {
			t.Errorf("%q has %d fields, the scan keeps %d keys", object, len(fields), maxPlacementObjectKeys)
		}
	}
}
