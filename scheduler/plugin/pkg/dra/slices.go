// Package dra describes a node's tiered resources as Dynamic Resource Allocation objects
// (resource.k8s.io/v1): the ResourceSlices tmc's node component publishes for a node and for a
// rack pool. It is pure: capacity in, slices out, nothing read from or written to a cluster.
//
// What a node publishes, all under the driver DriverName:
//
//   - LLC ways as shared counters: one counter per way ("way-<i>", value 1), in counter sets of
//     at most 32 ways ("llc-ways-0" holds ways 0..31, "llc-ways-1" ways 32..63).
//   - One device per contiguous run of ways a placement may take ("ways-<first>-<count>"),
//     consuming the counters of its ways, so that two overlapping runs are never allocated
//     together. By default every run of every length: n(n+1)/2 devices for n ways (1,176 for 48
//     ways, 2,080 for 64), which covers any way count a grid can ask for at any free position.
//     Options.WayCounts restricts the lengths (the paper grid's seven counts give 273 devices
//     at 48 ways).
//   - DRAM and node-local slow memory as one device each with consumable capacity
//     ("bytes"): any number of allocations, each taking whole MiB of it.
//
// A rack pool publishes one device of consumable slow memory in a pool of its own, available
// on every node labelled PoolLabel=<pool>.
//
// The API's limits this respects (k8s.io/api/resource/v1 types.go and
// k8s.io/kubernetes/pkg/apis/resource/validation at v1.36.3): a slice holds either devices or
// shared counters, never both; at most 8 counter sets of at most 32 counters in a slice; a
// device consumes from at most 2 counter sets, at most 32 counters from each; at most 64
// devices in a slice once any of them consumes counters (128 otherwise); device, counter and
// counter set names are DNS labels; attribute and capacity names are C identifiers of at most
// 32 characters; string attributes at most 64 characters; a slice's node selector has exactly
// one term, and a field selector (metadata.name) takes exactly one value, so a pool shared by
// several nodes selects them by label.
package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

const (
	// DriverName is the DRA driver that publishes tmc's devices, the domain of their attributes
	// and capacities.
	DriverName = "tmc.dev"

	// PoolLabel marks a node as a member of a rack pool: its value is the pool's name. The rack
	// pool's slice selects its nodes by it.
	PoolLabel = "tmc.dev/slow-pool"

	// The device attributes (in the driver's domain: device.attributes["tmc.dev"].kind).
	AttrKind     = "kind"     // one of the Kind* values
	AttrFirstWay = "firstWay" // the run's first way (llc-ways devices)
	AttrWays     = "ways"     // the run's length in ways (llc-ways devices)
	AttrMask     = "mask"     // the run's CAT mask, "0x..." (llc-ways devices)
	AttrHostKind = "hostKind" // the node's host kind, when it publishes one (node devices)
	AttrPool     = "pool"     // the rack pool's name (slow-pool devices)

	// CapacityBytes is the consumable capacity of the memory devices, in bytes.
	CapacityBytes = "bytes"

	KindLLCWays   = "llc-ways"
	KindDRAM      = "dram"
	KindSlowLocal = "slow-local"
	KindSlowPool  = "slow-pool"

	// MiB is the granularity of memory allocations: a request is rounded up to whole MiB, and
	// a device's capacity is its bytes rounded down to whole MiB.
	MiB = int64(1) << 20

	// WaysPerCounterSet is how many ways' counters one counter set holds: the API's limit of
	// counters per set, and of counters a device consumes from one set.
	WaysPerCounterSet = resourceapi.ResourceSliceMaxCountersPerCounterSet
	// DevicesPerSlice is how many devices a slice holds when they consume counters.
	DevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

	// RackPoolPrefix prefixes a rack pool's DRA pool name; a node's pool is the node's name,
	// which has no slash, so the two never collide.
	RackPoolPrefix = "rack-pool/"
	// MaxPoolNameLength bounds a rack pool's name: it is a label value on the nodes.
	MaxPoolNameLength = validation.LabelValueMaxLength
)

// Options are the choices a publisher makes beyond the node's capacity.
type Options struct {
	// Generation is the DRA pool's generation, the same in all of a pool's slices; a publisher
	// raises it whenever anything in the pool changes. 0..2^52.
	Generation int64
	// WayCounts restricts the LLC-way devices to runs of these lengths (each 1..the node's
	// ways; counts above the node's ways are left out). Nil or empty: every length.
	WayCounts []int
}

var (
	hostKind = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

// NodeSlices is the ResourceSlices of one node's pool (named after the node): a slice of the
// way counters, a slice of the memory devices, then the way-run devices, 64 to a slice. Every
// number of the capacity is range-checked first; nothing is published for invalid input.
func NodeSlices(node string, c v1alpha1.NodeCapacity, opts Options) ([]resourceapi.ResourceSlice, error) {
	if err := checkNode(node, c, opts); err != nil {
		return nil, err
	}
	counts, err := wayCounts(c.LLCWays, opts.WayCounts)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	common := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if c.HostKind != "" {
		common[AttrHostKind] = str(c.HostKind)
	}

	specs := []resourceapi.ResourceSliceSpec{{SharedCounters: counterSets(c.LLCWays)}}
	var memory []resourceapi.Device
	if d, ok := memoryDevice("dram", KindDRAM, c.DRAMBytes, common); ok {
		memory = append(memory, d)
	}
	if d, ok := memoryDevice("slow", KindSlowLocal, c.SlowBytes, common); ok {
		memory = append(memory, d)
	}
	if len(memory) > 0 {
		specs = append(specs, resourceapi.ResourceSliceSpec{Devices: memory})
	}
	runs := wayDevices(c.LLCWays, counts, common)
	for len(runs) > 0 {
		n := min(len(runs), DevicesPerSlice)
		specs = append(specs, resourceapi.ResourceSliceSpec{Devices: runs[:n:n]})
		runs = runs[n:]
	}
	for i := range specs {
		specs[i].NodeName = &node
	}
	return slices("node", node, specs, opts.Generation), nil
}

// RackPoolSlices is the ResourceSlice of a rack pool's slow memory: one device of consumable
// capacity, available on the nodes labelled PoolLabel=<pool>. A pool of less than 2 MiB (one
// allocation step above the minimum) publishes no slice.
func RackPoolSlices(pool string, bytes int64, opts Options) ([]resourceapi.ResourceSlice, error) {
	if err := checkPool(pool); err != nil {
		return nil, err
	}
	if err := checkBytes("rack pool "+pool, bytes); err != nil {
		return nil, err
	}
	if err := checkGeneration(opts.Generation); err != nil {
		return nil, err
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrPool: str(pool)}
	d, ok := memoryDevice("slow", KindSlowPool, bytes, attrs)
	if !ok {
		return nil, nil
	}
	spec := resourceapi.ResourceSliceSpec{
		Devices: []resourceapi.Device{d},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: PoolLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{pool},
			}},
		}}},
	}
	return slices("pool", RackPoolPrefix+pool, []resourceapi.ResourceSliceSpec{spec}, opts.Generation), nil
}

// PoolBytes is a rack pool's size as the engine counts it: the operator's (configured, the
// chart's rackPools) when it names the pool, else the smallest size any member publishes (a
// node can shrink a pool, never grow it); 0 when neither says.
func PoolBytes(pool string, configured map[string]int64, members []v1alpha1.NodeCapacity) int64 {
	if v, ok := configured[pool]; ok {
		return v
	}
	size, seen := int64(0), false
	for _, m := range members {
		if m.SlowPool != pool || m.SlowPoolBytes == nil {
			continue
		}
		if !seen || *m.SlowPoolBytes < size {
			size, seen = *m.SlowPoolBytes, true
		}
	}
	return size
}

// Node is a node's name and its published capacity.
type Node struct {
	Name     string
	Capacity v1alpha1.NodeCapacity
}

// ClusterSlices is every slice for these nodes and the rack pools they name, nodes in the
// order given, then pools by name. configured is the operator's pool sizes.
func ClusterSlices(nodes []Node, configured map[string]int64, opts Options) ([]resourceapi.ResourceSlice, error) {
	var out []resourceapi.ResourceSlice
	members := map[string][]v1alpha1.NodeCapacity{}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] {
			return nil, fmt.Errorf("node %s is given twice", n.Name)
		}
		seen[n.Name] = true
		s, err := NodeSlices(n.Name, n.Capacity, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
		if n.Capacity.SlowPool != "" {
			members[n.Capacity.SlowPool] = append(members[n.Capacity.SlowPool], n.Capacity)
		}
	}
	for name, v := range configured {
		if err := checkPool(name); err != nil {
			return nil, err
		}
		if err := checkBytes("rack pool "+name, v); err != nil {
			return nil, err
		}
	}
	pools := make([]string, 0, len(members))
	for p := range members {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	for _, p := range pools {
		s, err := RackPoolSlices(p, PoolBytes(p, configured, members[p]), opts)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}

// RunMask is the CAT mask of count ways from first.
func RunMask(first, count int) uint64 {
	if count >= 64 {
		return ^uint64(0)
	}
	return ((uint64(1) << count) - 1) << first
}

func counterSetName(set int) string { return "llc-ways-" + strconv.Itoa(set) }
func counterName(way int) string    { return "way-" + strconv.Itoa(way) }

func counterSets(ways int) []resourceapi.CounterSet {
	var sets []resourceapi.CounterSet
	for first := 0; first < ways; first += WaysPerCounterSet {
		counters := map[string]resourceapi.Counter{}
		for w := first; w < min(ways, first+WaysPerCounterSet); w++ {
			counters[counterName(w)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
		}
		sets = append(sets, resourceapi.CounterSet{Name: counterSetName(first / WaysPerCounterSet), Counters: counters})
	}
	return sets
}

// wayDevices is a device per run of each length, shortest runs first, each run from its
// lowest first way.
func wayDevices(ways int, counts []int, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) []resourceapi.Device {
	var out []resourceapi.Device
	for _, count := range counts {
		for first := 0; first+count <= ways; first++ {
			attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrKind:     str(KindLLCWays),
				AttrFirstWay: integer(int64(first)),
				AttrWays:     integer(int64(count)),
				AttrMask:     str(fmt.Sprintf("%#x", RunMask(first, count))),
			}
			for k, v := range common {
				attrs[k] = v
			}
			out = append(out, resourceapi.Device{
				Name:             fmt.Sprintf("ways-%d-%d", first, count),
				Attributes:       attrs,
				ConsumesCounters: consumption(first, count),
			})
		}
	}
	return out
}

// consumption is the counters of ways first..first+count-1, by counter set: at most two sets
// for a run of at most 64 ways.
func consumption(first, count int) []resourceapi.DeviceCounterConsumption {
	var out []resourceapi.DeviceCounterConsumption
	for w := first; w < first+count; {
		set := w / WaysPerCounterSet
		end := min(first+count, (set+1)*WaysPerCounterSet)
		counters := map[string]resourceapi.Counter{}
		for ; w < end; w++ {
			counters[counterName(w)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
		}
		out = append(out, resourceapi.DeviceCounterConsumption{CounterSet: counterSetName(set), Counters: counters})
	}
	return out
}

// memoryDevice is a device of consumable bytes, rounded down to whole MiB; none below 2 MiB
// (the API wants the minimum plus one step within the capacity).
func memoryDevice(name, kind string, bytes int64, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) (resourceapi.Device, bool) {
	whole := bytes / MiB * MiB
	if whole < 2*MiB {
		return resourceapi.Device{}, false
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrKind: str(kind)}
	for k, v := range common {
		attrs[k] = v
	}
	step := resource.NewQuantity(MiB, resource.BinarySI)
	yes := true
	return resourceapi.Device{
		Name:                     name,
		Attributes:               attrs,
		AllowMultipleAllocations: &yes,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityBytes: {
				Value: *resource.NewQuantity(whole, resource.BinarySI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					// A request that names no bytes takes one step; tmc's claims always name them.
					Default: step,
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min:  step,
						Step: step,
					},
				},
			},
		},
	}, true
}

// slices wraps the specs in ResourceSlices of one pool, named after it in order.
func slices(kind, pool string, specs []resourceapi.ResourceSliceSpec, generation int64) []resourceapi.ResourceSlice {
	out := make([]resourceapi.ResourceSlice, len(specs))
	for i, spec := range specs {
		spec.Driver = DriverName
		spec.Pool = resourceapi.ResourcePool{
			Name: pool, Generation: generation, ResourceSliceCount: int64(len(specs)),
		}
		out[i] = resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: sliceName(kind, pool, i)},
			Spec:       spec,
		}
	}
	return out
}

// sliceName is tmc-<kind>-<pool>-<index>, or with a hash of the pool's name in its place when
// that would be longer than an object name may be. The pool's name is everything between the
// kind and the last dash, so two pools never share a name.
func sliceName(kind, pool string, i int) string {
	name := fmt.Sprintf("tmc-%s-%s-%d", kind, dotted(pool), i)
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(pool))
	return fmt.Sprintf("tmc-%s-%s-%d", kind, hex.EncodeToString(sum[:8]), i)
}

func dotted(pool string) string {
	b := []byte(pool)
	for i, c := range b {
		if c == '/' {
			b[i] = '.'
		}
	}
	return string(b)
}

func str(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &v} }
func integer(v int64) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{IntValue: &v}
}

func wayCounts(ways int, given []int) ([]int, error) {
	if len(given) == 0 {
		all := make([]int, ways)
		for i := range all {
			all[i] = i + 1
		}
		return all, nil
	}
	if len(given) > v1alpha1.MaxLLCWays {
		return nil, fmt.Errorf("at most %d way counts, not %d", v1alpha1.MaxLLCWays, len(given))
	}
	seen := map[int]bool{}
	var out []int
	for _, n := range given {
		if n < 1 || n > v1alpha1.MaxLLCWays {
			return nil, fmt.Errorf("a way count must be in 1..%d, not %d", v1alpha1.MaxLLCWays, n)
		}
		if seen[n] {
			return nil, fmt.Errorf("way count %d is given twice", n)
		}
		seen[n] = true
		if n <= ways {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("no way count fits the node's %d ways", ways)
	}
	return out, nil
}

func checkNode(node string, c v1alpha1.NodeCapacity, opts Options) error {
	if len(node) > validation.DNS1123SubdomainMaxLength || !dnsName.MatchString(node) {
		return fmt.Errorf("node name %q is not a DNS subdomain", clip(node))
	}
	if c.LLCWays < 1 || c.LLCWays > v1alpha1.MaxLLCWays {
		return fmt.Errorf("node %s: llc_ways must be in 1..%d, not %d", node, v1alpha1.MaxLLCWays, c.LLCWays)
	}
	if c.CPUs < 0 || c.CPUs > v1alpha1.MaxCPUs {
		return fmt.Errorf("node %s: cpus must be in 0..%d, not %d", node, v1alpha1.MaxCPUs, c.CPUs)
	}
	if err := checkBytes("node "+node+": dram_bytes", c.DRAMBytes); err != nil {
		return err
	}
	if err := checkBytes("node "+node+": slow_bytes", c.SlowBytes); err != nil {
		return err
	}
	if c.HostKind != "" && (len(c.HostKind) > validation.LabelValueMaxLength || !hostKind.MatchString(c.HostKind)) {
		return fmt.Errorf("node %s: host kind %q is not a label value", node, clip(c.HostKind))
	}
	if c.SlowPool != "" {
		if err := checkPool(c.SlowPool); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
	}
	if c.SlowPoolBytes != nil {
		if err := checkBytes("node "+node+": slow_pool_bytes", *c.SlowPoolBytes); err != nil {
			return err
		}
	}
	return checkGeneration(opts.Generation)
}

func checkPool(pool string) error {
	if len(pool) > MaxPoolNameLength || !dnsName.MatchString(pool) {
		return fmt.Errorf("rack pool %q must be a DNS subdomain of at most %d characters (a label value)", clip(pool), MaxPoolNameLength)
	}
	return nil
}

func checkBytes(what string, v int64) error {
	if v < 0 || v >= v1alpha1.MaxBytes {
		return fmt.Errorf("%s must be in 0..2^52, not %d", what, v)
	}
	return nil
}

func checkGeneration(g int64) error {
	if g < 0 || g >= v1alpha1.MaxBytes {
		return fmt.Errorf("generation must be in 0..2^52, not %d", g)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
