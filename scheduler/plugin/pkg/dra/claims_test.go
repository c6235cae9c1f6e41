package dra

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
)

const (
	mib = int64(1) << 20
	// maxTierBytes is the largest byte count an alternative may name.
	maxTierBytes = int64(1)<<52 - 1
)

// validClaim holds a claim of the spec to kube-apiserver's own validation (v1.36.3), after the
// conversion the API server makes.
func validClaim(t *testing.T, spec resourceapi.ResourceClaimSpec) {
	t.Helper()
	claim := resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "graph500", Namespace: "tenant"},
		Spec:       spec,
	}
	var internal resourceinternal.ResourceClaim
	if err := legacyscheme.Scheme.Convert(&claim, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceClaim(&internal); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
}

func subrequestBytes(t *testing.T, r resourceapi.DeviceRequest) []string {
	t.Helper()
	var out []string
	for _, s := range r.FirstAvailable {
		q := s.Capacity.Requests[CapacityBytes]
		out = append(out, s.DeviceClassName+" "+q.String())
	}
	return out
}

func TestClaimSpecOffersEachAlternativeInOrderAndWhole(t *testing.T) {
	spec, err := ClaimSpec([]Alternative{
		{LLCWays: 20, DRAMBytes: 4 * gib, SlowBytes: 4 * gib},
		{LLCWays: 12, DRAMBytes: 6*gib + 1, SlowBytes: 2 * gib},
		{LLCWays: 4, DRAMBytes: 8 * gib},
	})
	if err != nil {
		t.Fatal(err)
	}
	validClaim(t, spec)
	requests := spec.Devices.Requests
	if len(requests) != 3 || requests[0].Name != RequestWays || requests[1].Name != RequestDRAM || requests[2].Name != RequestSlow {
		t.Fatalf("requests %+v", requests)
	}
	// Each alternative's ways as a count of the node's way device, no selector naming a run.
	for i, s := range requests[0].FirstAvailable {
		q := s.Capacity.Requests[CapacityWays]
		if s.Name != SubrequestName(i) || s.DeviceClassName != ClassLLCWays || len(s.Selectors) != 0 ||
			s.Count != 1 || len(s.Capacity.Requests) != 1 || q.Value() != int64([]int{20, 12, 4}[i]) || q.String() != fmt.Sprint([]int{20, 12, 4}[i]) {
			t.Errorf("ways subrequest %d: %+v", i, s)
		}
	}
	// Whole MiB, rounded up; the alternative without slow memory takes its last MiB of DRAM
	// through the slow request.
	if got, want := subrequestBytes(t, requests[1]), []string{"dram.tmc.dev 4Gi", "dram.tmc.dev 6145Mi", "dram.tmc.dev 8191Mi"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("dram %v, want %v", got, want)
	}
	if got, want := subrequestBytes(t, requests[2]), []string{"slow-memory.tmc.dev 4Gi", "slow-memory.tmc.dev 2Gi", "dram.tmc.dev 1Mi"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slow %v, want %v", got, want)
	}
	// One constraint per (i, j ≠ i) with each memory request: the ways of one alternative never
	// go with another's memory, and no constraint names two subrequests of one alternative.
	var pairs []string
	for _, c := range spec.Devices.Constraints {
		if c.MatchAttribute == nil || string(*c.MatchAttribute) != "tmc.dev/kind" || len(c.Requests) != 2 {
			t.Fatalf("constraint %+v", c)
		}
		pairs = append(pairs, strings.Join(c.Requests, "+"))
	}
	var want []string
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if i != j {
				want = append(want, fmt.Sprintf("ways/c%d+dram/c%d", i, j), fmt.Sprintf("ways/c%d+slow/c%d", i, j))
			}
		}
	}
	if fmt.Sprint(pairs) != fmt.Sprint(want) {
		t.Errorf("constraints %v, want %v", pairs, want)
	}
}

func TestClaimSpecWithoutSlowMemoryHasNoSlowRequest(t *testing.T) {
	spec, err := ClaimSpec([]Alternative{{LLCWays: 4, DRAMBytes: 8 * gib}, {LLCWays: 1, DRAMBytes: 8 * gib}})
	if err != nil {
		t.Fatal(err)
	}
	validClaim(t, spec)
	if len(spec.Devices.Requests) != 2 || len(spec.Devices.Constraints) != 2 {
		t.Fatalf("%d requests, %d constraints", len(spec.Devices.Requests), len(spec.Devices.Constraints))
	}
	if got := subrequestBytes(t, spec.Devices.Requests[1]); fmt.Sprint(got) != "[dram.tmc.dev 8Gi dram.tmc.dev 8Gi]" {
		t.Errorf("dram %v", got)
	}
}

func TestClaimSpecAtTheAPIsLimits(t *testing.T) {
	var four []Alternative
	for i := 0; i < MaxAlternatives; i++ {
		four = append(four, Alternative{LLCWays: 64 - i, DRAMBytes: maxTierBytes, SlowBytes: maxTierBytes - int64(i)*mib})
	}
	spec, err := ClaimSpec(four)
	if err != nil {
		t.Fatal(err)
	}
	validClaim(t, spec)
	if n := len(spec.Devices.Constraints); n != 24 || n > resourceapi.DeviceConstraintsMaxSize {
		t.Errorf("%d constraints", n)
	}
}

func TestClaimSpecRefusesWhatItCannotOffer(t *testing.T) {
	ok := Alternative{LLCWays: 4, DRAMBytes: gib}
	for name, alts := range map[string][]Alternative{
		"1..4 alternatives, not 0":       nil,
		"1..4 alternatives, not 5":       {ok, {LLCWays: 1, DRAMBytes: gib}, {LLCWays: 2, DRAMBytes: gib}, {LLCWays: 3, DRAMBytes: gib}, {LLCWays: 5, DRAMBytes: gib}},
		"llc_ways must be in 1..64":      {{LLCWays: 0, DRAMBytes: gib}},
		"llc_ways must be in 1..64, not": {{LLCWays: 65, DRAMBytes: gib}},
		"dram_bytes must be at least 1":  {{LLCWays: 4}},
		"dram_bytes must be in 0..2^52":  {{LLCWays: 4, DRAMBytes: int64(1) << 52}},
		"slow_bytes must be in 0..2^52":  {{LLCWays: 4, DRAMBytes: gib, SlowBytes: -1}},
		"alternative 1 repeats":          {ok, ok},
	} {
		if _, err := ClaimSpec(alts); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
