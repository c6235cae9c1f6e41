// Package dra describes a node's tiered resources as Dynamic Resource Allocation objects
// (resource.k8s.io/v1): the ResourceSlices tmc's node component publishes for a node and for a
// rack pool, and the claims that take a recommendation's configuration from them. It is pure:
// capacity in, objects out, nothing read from or written to a cluster.
//
// What a node publishes, all under the driver DriverName, in one slice of its own pool (named
// after the node):
//
//   - Its LLC ways as a count: one device "ways" (kind "llc-ways") with the consumable capacity
//     "ways", the node's way count, shared by any number of claims, each taking whole ways
//     (1..the node's ways). The allocator keeps the ways a node's claims take together within
//     the count.
//   - DRAM and node-local slow memory as one device each with the consumable capacity "bytes",
//     shared the same way, each claim taking whole MiB.
//
// A rack pool publishes one device of consumable slow memory in a pool of its own, available on
// every node labelled PoolLabel=<pool>.
//
// Why a count, and not a device per contiguous run of ways: CAT needs a contiguous mask, and a
// device per run (consuming one shared counter per way, so that overlapping runs exclude each
// other) let the scheduler choose the position. kube-scheduler's DRA allocator rebuilds and
// checks every device and counter of a node on every Filter: with the paper grid's seven way
// counts (273 run devices and 48 counters a 48-way node) that was 0.3 pods/s through the stock
// scheduler at 100 nodes, 3.5 s of scheduler CPU a pod (docs/install.md). Three consumable
// devices a node cost it little more than an extended resource does.
//
// What a count cannot say is where the ways are. The node turns it into a mask when it applies
// the claim: its held groups' runs are packed toward way 0 (Compact), moving as few of them as
// it can, and the new group takes the run after them. Packed runs leave every free way in one
// run at the top, and the allocator never lets the counts exceed the node's ways, so a count
// the allocator granted always fits after compaction. A running group's resctrl schemata can be
// rewritten in place, so moving it costs a rewrite, not a restart. The node's DRA plugin
// (tmc-dra-node, node/nri) follows this rule when the kubelet prepares a claim, and tmc-nri
// applies the prepared claim when each container is created.
//
// The API's limits this respects (k8s.io/api/resource/v1 types.go and
// k8s.io/kubernetes/pkg/apis/resource/validation at v1.36.3): a consumable capacity needs
// allowMultipleAllocations (the DRAConsumableCapacity gate, beta and on by default at v1.36); a
// request policy's range has a minimum no larger than the capacity, a step such that the
// minimum plus one step fits in it, and a default and maximum on the steps; device names are
// DNS labels; attribute and capacity names are C identifiers of at most 32 characters; string
// attributes at most 64 characters; a slice's node selector has exactly one term, and a field
// selector (metadata.name) takes exactly one value, so a pool shared by several nodes selects
// them by label.
package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"

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
	AttrHostKind = "hostKind" // the node's host kind, when it publishes one (node devices)
	AttrPool     = "pool"     // the rack pool's name (slow-pool devices)

	// CapacityBytes is the consumable capacity of the memory devices, in bytes.
	CapacityBytes = "bytes"
	// CapacityWays is the consumable capacity of the LLC-way device, in ways.
	CapacityWays = "ways"

	// The devices of a node's pool.
	DeviceWays = "ways"
	DeviceDRAM = "dram"
	DeviceSlow = "slow"

	KindLLCWays   = "llc-ways"
	KindDRAM      = "dram"
	KindSlowLocal = "slow-local"
	KindSlowPool  = "slow-pool"

	// MiB is the granularity of memory allocations: a request is rounded up to whole MiB, and
	// a device's capacity is its bytes rounded down to whole MiB.
	MiB = int64(1) << 20

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
}

var (
	hostKind = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

// NodeSlices is the ResourceSlices of one node's pool (named after the node): one slice of its
// LLC-way device and its memory devices. Every number of the capacity is range-checked first;
// nothing is published for invalid input.
func NodeSlices(node string, c v1alpha1.NodeCapacity, opts Options) ([]resourceapi.ResourceSlice, error) {
	if err := checkNode(node, c, opts); err != nil {
		return nil, err
	}
	common := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if c.HostKind != "" {
		common[AttrHostKind] = str(c.HostKind)
	}
	devices := []resourceapi.Device{waysDevice(c.LLCWays, common)}
	if d, ok := memoryDevice(DeviceDRAM, KindDRAM, c.DRAMBytes, common); ok {
		devices = append(devices, d)
	}
	if d, ok := memoryDevice(DeviceSlow, KindSlowLocal, c.SlowBytes, common); ok {
		devices = append(devices, d)
	}
	spec := resourceapi.ResourceSliceSpec{Devices: devices, NodeName: &node}
	return slices("node", node, []resourceapi.ResourceSliceSpec{spec}, opts.Generation), nil
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

// waysDevice is the node's LLC ways as one device of consumable capacity: any number of
// allocations, each taking whole ways, 1..ways in all. A range's step must fit in the capacity
// above its minimum, so a node of one way has a range without a step (1..1).
func waysDevice(ways int, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrKind: str(KindLLCWays)}
	for k, v := range common {
		attrs[k] = v
	}
	one := func() *resource.Quantity { return resource.NewQuantity(1, resource.DecimalSI) }
	valid := &resourceapi.CapacityRequestPolicyRange{
		Min: one(), Max: resource.NewQuantity(int64(ways), resource.DecimalSI),
	}
	if ways > 1 {
		valid.Step = one()
	}
	yes := true
	return resourceapi.Device{
		Name:                     DeviceWays,
		Attributes:               attrs,
		AllowMultipleAllocations: &yes,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityWays: {
				Value: *resource.NewQuantity(int64(ways), resource.DecimalSI),
				// A request that names no ways takes one; tmc's claims always name them.
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: one(), ValidRange: valid},
			},
		},
	}
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
