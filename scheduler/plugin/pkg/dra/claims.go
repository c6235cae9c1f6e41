package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// The chart's DeviceClasses (deploy/helm/tmc/templates/dra.yaml), one per tiered resource.
const (
	ClassLLCWays    = "llc-ways.tmc.dev"
	ClassDRAM       = "dram.tmc.dev"
	ClassSlowMemory = "slow-memory.tmc.dev"
)

// The requests of a claim made by ClaimSpec, and the name of alternative i's subrequest in each
// ("c0" is the preferred one): an allocation result names "ways/c1" when the second alternative
// was taken.
const (
	RequestWays = "ways"
	RequestDRAM = "dram"
	RequestSlow = "slow"
)

// MaxAlternatives is how many configurations one claim offers. The joint choice costs
// 2·n·(n-1) constraints (below), and a claim holds at most 32: four alternatives take 24.
const MaxAlternatives = 4

// Alternative is one configuration a pod may be given: a number of LLC ways and bytes of each
// tier, in the order of preference the claim keeps.
type Alternative struct {
	LLCWays   int   `json:"llc_ways"`
	DRAMBytes int64 `json:"dram_bytes"`
	SlowBytes int64 `json:"slow_bytes"`
}

// SubrequestName is the name of alternative i's subrequest in each request.
func SubrequestName(i int) string { return fmt.Sprintf("c%d", i) }

// ClaimSpec is a claim that takes exactly one of the alternatives, the first that fits a node,
// as one whole: its ways, its DRAM and its slow memory.
//
// DRA's prioritized list (firstAvailable) chooses a subrequest per request, on its own: a claim
// of three requests, each listing the alternatives, could be given the first alternative's
// ways with the second's DRAM, a configuration nobody recommended. The allocator does honour
// constraints that name subrequests, and a matchAttribute constraint fails whenever the
// devices it names differ in that attribute. The LLC-way device has kind "llc-ways" and no
// memory device has, so a constraint naming "ways/ci" and "dram/cj" (i ≠ j) fails exactly when
// both are chosen: for every i ≠ j one such constraint with the DRAM request and one with the
// slow request leave only the combinations that take one alternative whole. The allocator
// tries them in order, and kube-scheduler's DynamicResources score favours nodes where an
// earlier one was taken.
//
// Each alternative asks the node's LLC-way device for its ways as consumable capacity
// (capacity.requests: {ways: n}), and memory in whole MiB, rounded up, as the devices count it. A request must take a
// device, so an alternative without slow memory takes its last MiB of DRAM through the slow
// request (from the DRAM device, the same bytes in all); a claim whose alternatives all lack
// slow memory has no slow request. Nothing is made for invalid input.
func ClaimSpec(alternatives []Alternative) (resourceapi.ResourceClaimSpec, error) {
	if err := checkAlternatives(alternatives); err != nil {
		return resourceapi.ResourceClaimSpec{}, err
	}
	anySlow := false
	for _, a := range alternatives {
		anySlow = anySlow || a.SlowBytes > 0
	}
	ways := resourceapi.DeviceRequest{Name: RequestWays}
	dram := resourceapi.DeviceRequest{Name: RequestDRAM}
	slow := resourceapi.DeviceRequest{Name: RequestSlow}
	for i, a := range alternatives {
		name := SubrequestName(i)
		ways.FirstAvailable = append(ways.FirstAvailable,
			consumeSubrequest(name, ClassLLCWays, CapacityWays, *resource.NewQuantity(int64(a.LLCWays), resource.DecimalSI)))
		dramMiB, slowMiB := wholeMiB(a.DRAMBytes), wholeMiB(a.SlowBytes)
		slowClass := ClassSlowMemory
		if anySlow && slowMiB == 0 {
			// The last MiB of DRAM stands in for the slow memory this alternative has none of.
			dramMiB, slowMiB, slowClass = max(dramMiB, 2)-1, 1, ClassDRAM
		}
		dram.FirstAvailable = append(dram.FirstAvailable, memorySubrequest(name, ClassDRAM, dramMiB))
		if anySlow {
			slow.FirstAvailable = append(slow.FirstAvailable, memorySubrequest(name, slowClass, slowMiB))
		}
	}
	requests := []resourceapi.DeviceRequest{ways, dram}
	if anySlow {
		requests = append(requests, slow)
	}
	var constraints []resourceapi.DeviceConstraint
	kind := resourceapi.FullyQualifiedName(DriverName + "/" + AttrKind)
	for i := range alternatives {
		for j := range alternatives {
			if i == j {
				continue
			}
			for _, r := range requests[1:] {
				constraints = append(constraints, resourceapi.DeviceConstraint{
					Requests: []string{
						RequestWays + "/" + SubrequestName(i), r.Name + "/" + SubrequestName(j),
					},
					MatchAttribute: &kind,
				})
			}
		}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: requests, Constraints: constraints,
	}}, nil
}

func memorySubrequest(name, class string, mib int64) resourceapi.DeviceSubRequest {
	return consumeSubrequest(name, class, CapacityBytes, *resource.NewQuantity(mib*MiB, resource.BinarySI))
}

// consumeSubrequest takes one device of the class, and this much of its capacity.
func consumeSubrequest(name, class string, capacity resourceapi.QualifiedName, q resource.Quantity) resourceapi.DeviceSubRequest {
	return resourceapi.DeviceSubRequest{
		Name:            name,
		DeviceClassName: class,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			capacity: q,
		}},
	}
}

// wholeMiB is bytes in MiB, rounded up.
func wholeMiB(bytes int64) int64 { return (bytes + MiB - 1) / MiB }

func checkAlternatives(alternatives []Alternative) error {
	if len(alternatives) < 1 || len(alternatives) > MaxAlternatives {
		return fmt.Errorf("a claim offers 1..%d alternatives, not %d", MaxAlternatives, len(alternatives))
	}
	seen := map[Alternative]int{}
	for i, a := range alternatives {
		if a.LLCWays < 1 || a.LLCWays > v1alpha1.MaxLLCWays {
			return fmt.Errorf("alternative %d: llc_ways must be in 1..%d, not %d", i, v1alpha1.MaxLLCWays, a.LLCWays)
		}
		if err := checkBytes(fmt.Sprintf("alternative %d: dram_bytes", i), a.DRAMBytes); err != nil {
			return err
		}
		if a.DRAMBytes < 1 {
			return fmt.Errorf("alternative %d: dram_bytes must be at least 1: a pod runs in DRAM", i)
		}
		if err := checkBytes(fmt.Sprintf("alternative %d: slow_bytes", i), a.SlowBytes); err != nil {
			return err
		}
		if first, ok := seen[a]; ok {
			return fmt.Errorf("alternative %d repeats alternative %d", i, first)
		}
		seen[a] = i
	}
	return nil
}
