package dra

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

const gib = int64(1) << 30

func capacity(ways int) v1alpha1.NodeCapacity {
	return v1alpha1.NodeCapacity{
		HostKind: "optane-48", DRAMBytes: 24 * gib, SlowBytes: 128 * gib, LLCWays: ways,
	}
}

// valid holds each slice to kube-apiserver's own validation of ResourceSlices (v1.36.3),
// after the conversion the API server makes.
func valid(t *testing.T, slices []resourceapi.ResourceSlice) {
	t.Helper()
	for i := range slices {
		var internal resourceinternal.ResourceSlice
		if err := legacyscheme.Scheme.Convert(&slices[i], &internal, nil); err != nil {
			t.Fatalf("%s: %v", slices[i].Name, err)
		}
		if errs := validation.ValidateResourceSlice(&internal); len(errs) > 0 {
			t.Fatalf("%s: %v", slices[i].Name, errs.ToAggregate())
		}
	}
}

type run struct{ first, count int }

// runs checks every slice against the API's per-slice limits and that each way device consumes
// exactly the counters of its contiguous run, and returns the runs found.
func runs(t *testing.T, node string, ways int, slices []resourceapi.ResourceSlice) map[run]bool {
	t.Helper()
	found := map[run]bool{}
	names := map[string]bool{}
	counters := map[string]bool{}
	for _, s := range slices {
		if names[s.Name] {
			t.Fatalf("slice %s twice", s.Name)
		}
		names[s.Name] = true
		if s.Spec.Driver != DriverName || s.Spec.Pool.Name != node || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			t.Fatalf("%s: driver %q pool %q", s.Name, s.Spec.Driver, s.Spec.Pool.Name)
		}
		if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) {
			t.Fatalf("%s: resourceSliceCount %d of %d slices", s.Name, s.Spec.Pool.ResourceSliceCount, len(slices))
		}
		if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
			t.Fatalf("%s: devices and counters in one slice", s.Name)
		}
		if len(s.Spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Fatalf("%s: %d counter sets", s.Name, len(s.Spec.SharedCounters))
		}
		for _, set := range s.Spec.SharedCounters {
			if len(set.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Fatalf("%s: %d counters in %s", s.Name, len(set.Counters), set.Name)
			}
			for c := range set.Counters {
				counters[set.Name+"/"+c] = true
			}
		}
		if len(s.Spec.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Fatalf("%s: %d devices", s.Name, len(s.Spec.Devices))
		}
		for _, d := range s.Spec.Devices {
			if *d.Attributes[AttrKind].StringValue != KindLLCWays {
				continue
			}
			r := run{int(*d.Attributes[AttrFirstWay].IntValue), int(*d.Attributes[AttrWays].IntValue)}
			if found[r] {
				t.Fatalf("run %v twice", r)
			}
			found[r] = true
			if r.first < 0 || r.count < 1 || r.first+r.count > ways {
				t.Fatalf("run %v outside %d ways", r, ways)
			}
			if want := fmt.Sprintf("%#x", RunMask(r.first, r.count)); *d.Attributes[AttrMask].StringValue != want {
				t.Fatalf("run %v: mask %s, want %s", r, *d.Attributes[AttrMask].StringValue, want)
			}
			if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				t.Fatalf("run %v: %d consumptions", r, len(d.ConsumesCounters))
			}
			consumed := map[int]bool{}
			for _, c := range d.ConsumesCounters {
				if len(c.Counters) > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
					t.Fatalf("run %v: %d counters from %s", r, len(c.Counters), c.CounterSet)
				}
				for name, v := range c.Counters {
					if !counters[c.CounterSet+"/"+name] {
						t.Fatalf("run %v consumes %s/%s, which no counter set has", r, c.CounterSet, name)
					}
					if v.Value.Value() != 1 {
						t.Fatalf("run %v takes %s of %s", r, v.Value.String(), name)
					}
					w, err := strconv.Atoi(strings.TrimPrefix(name, "way-"))
					if err != nil || consumed[w] || c.CounterSet != fmt.Sprintf("llc-ways-%d", w/32) {
						t.Fatalf("run %v: counter %s in %s", r, name, c.CounterSet)
					}
					consumed[w] = true
				}
			}
			// Contiguity: exactly the run's ways, so two devices share a counter iff their runs
			// overlap, and the allocator never gives out overlapping runs.
			if len(consumed) != r.count {
				t.Fatalf("run %v consumes %d ways", r, len(consumed))
			}
			for w := r.first; w < r.first+r.count; w++ {
				if !consumed[w] {
					t.Fatalf("run %v does not consume way %d", r, w)
				}
			}
		}
	}
	if len(counters) != ways {
		t.Fatalf("%d way counters for %d ways", len(counters), ways)
	}
	return found
}

func TestA48WayNodeHasADeviceForEveryRunIn21Slices(t *testing.T) {
	slices, err := NodeSlices("node-a", capacity(48), Options{Generation: 3})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	found := runs(t, "node-a", 48, slices)
	if len(found) != 48*49/2 { // 1,176
		t.Fatalf("%d runs", len(found))
	}
	for count := 1; count <= 48; count++ {
		for first := 0; first+count <= 48; first++ {
			if !found[run{first, count}] {
				t.Fatalf("no device for %d ways from way %d", count, first)
			}
		}
	}
	// Counters, memory, then ceil(1176 / 64) = 19 slices of runs.
	if len(slices) != 21 {
		t.Fatalf("%d slices", len(slices))
	}
	if len(slices[0].Spec.SharedCounters) != 2 || len(slices[0].Spec.SharedCounters[1].Counters) != 16 {
		t.Fatalf("counter sets %v", slices[0].Spec.SharedCounters)
	}
	for _, s := range slices {
		if s.Spec.Pool.Generation != 3 {
			t.Fatalf("%s: generation %d", s.Name, s.Spec.Pool.Generation)
		}
	}
}

func TestA64WayNodeHas2080RunsAndTheWholeRunSpansBothCounterSets(t *testing.T) {
	slices, err := NodeSlices("node-64", capacity(64), Options{})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	found := runs(t, "node-64", 64, slices)
	if len(found) != 2080 || len(slices) != 2+33 {
		t.Fatalf("%d runs in %d slices", len(found), len(slices))
	}
	last := slices[len(slices)-1].Spec.Devices
	whole := last[len(last)-1]
	if whole.Name != "ways-0-64" || len(whole.ConsumesCounters) != 2 ||
		len(whole.ConsumesCounters[0].Counters) != 32 || len(whole.ConsumesCounters[1].Counters) != 32 ||
		*whole.Attributes[AttrMask].StringValue != "0xffffffffffffffff" {
		t.Fatalf("the 64-way run: %+v", whole)
	}
}

func TestWayCountsRestrictTheRunsToTheGridsLengths(t *testing.T) {
	slices, err := NodeSlices("node-a", capacity(48), Options{WayCounts: []int{28, 1, 2, 3, 4, 12, 20}})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	found := runs(t, "node-a", 48, slices)
	// 48 + 47 + 46 + 45 + 37 + 29 + 21 runs, in ceil(273 / 64) = 5 slices.
	if len(found) != 273 || len(slices) != 2+5 {
		t.Fatalf("%d runs in %d slices", len(found), len(slices))
	}
	for r := range found {
		switch r.count {
		case 1, 2, 3, 4, 12, 20, 28:
		default:
			t.Fatalf("run %v", r)
		}
	}
	// Counts above a small node's ways are left out; none left is an error.
	small, err := NodeSlices("node-s", capacity(8), Options{WayCounts: []int{4, 12}})
	if err != nil {
		t.Fatal(err)
	}
	if got := runs(t, "node-s", 8, small); len(got) != 5 {
		t.Fatalf("%d runs of 4 in 8 ways", len(got))
	}
	if _, err := NodeSlices("node-s", capacity(8), Options{WayCounts: []int{12}}); err == nil {
		t.Fatal("no way count fits, yet slices")
	}
}

func memoryDevices(slices []resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if k := *d.Attributes[AttrKind].StringValue; k != KindLLCWays {
				out[k] = d
			}
		}
	}
	return out
}

func TestMemoryIsConsumableInWholeMiB(t *testing.T) {
	c := capacity(12)
	c.DRAMBytes = 24*gib + 5 // not a whole MiB: rounded down
	slices, err := NodeSlices("node-a", c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	mem := memoryDevices(slices)
	if len(mem) != 2 {
		t.Fatalf("memory devices %v", mem)
	}
	for kind, want := range map[string]int64{KindDRAM: 24 * gib, KindSlowLocal: 128 * gib} {
		d := mem[kind]
		bytes := d.Capacity[CapacityBytes]
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || bytes.Value.Value() != want {
			t.Fatalf("%s: %+v", kind, d)
		}
		p := bytes.RequestPolicy
		if p == nil || p.ValidRange == nil || p.ValidRange.Step.Value() != MiB || p.ValidRange.Min.Value() != MiB || p.Default.Value() != MiB {
			t.Fatalf("%s: request policy %+v", kind, p)
		}
		if *d.Attributes[AttrHostKind].StringValue != "optane-48" {
			t.Fatalf("%s: attributes %v", kind, d.Attributes)
		}
	}
}

func TestANodeWithoutASlowTierPublishesNoSlowDevice(t *testing.T) {
	c := capacity(20)
	c.SlowBytes = 0
	slices, err := NodeSlices("dram-only", c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	mem := memoryDevices(slices)
	if _, ok := mem[KindSlowLocal]; ok || len(mem) != 1 {
		t.Fatalf("memory devices %v", mem)
	}
	// Below one allocation step above the minimum (2 MiB) a tier publishes nothing; with
	// neither tier there is no memory slice at all.
	c.DRAMBytes = 2*MiB - 1
	slices, err = NodeSlices("dram-only", c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	if mem := memoryDevices(slices); len(mem) != 0 || len(slices) != 1+4 { // counters, 210 runs
		t.Fatalf("%d slices, memory %v", len(slices), mem)
	}
	if _, err := ClusterSlices([]Node{{"dram-only", c}}, nil, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestARackPoolIsOneDeviceSharedByItsLabelledNodes(t *testing.T) {
	pooled := func(bytes int64) v1alpha1.NodeCapacity {
		c := capacity(48)
		c.SlowBytes, c.SlowPool, c.SlowPoolBytes = 0, "rack-a", &bytes
		return c
	}
	nodes := []Node{{"node-a", pooled(512 * gib)}, {"node-b", pooled(384 * gib)}, {"node-c", capacity(48)}}
	slices, err := ClusterSlices(nodes, nil, Options{Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	if len(slices) != 3*21+1 {
		t.Fatalf("%d slices", len(slices))
	}
	pool := slices[len(slices)-1]
	if pool.Spec.Pool.Name != "rack-pool/rack-a" || pool.Spec.NodeName != nil || pool.Spec.NodeSelector == nil {
		t.Fatalf("pool slice %+v", pool.Spec)
	}
	term := pool.Spec.NodeSelector.NodeSelectorTerms
	if len(term) != 1 || term[0].MatchExpressions[0].Key != PoolLabel || term[0].MatchExpressions[0].Values[0] != "rack-a" {
		t.Fatalf("node selector %+v", term)
	}
	d := pool.Spec.Devices[0]
	bytes := d.Capacity[CapacityBytes]
	// The smallest size a member publishes, as the engine counts it.
	if *d.Attributes[AttrKind].StringValue != KindSlowPool || bytes.Value.Value() != 384*gib || !*d.AllowMultipleAllocations {
		t.Fatalf("pool device %+v", d)
	}
	// The operator's size wins.
	slices, err = ClusterSlices(nodes, map[string]int64{"rack-a": 256 * gib}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bytes = slices[len(slices)-1].Spec.Devices[0].Capacity[CapacityBytes]
	if bytes.Value.Value() != 256*gib {
		t.Fatalf("configured pool: %s", bytes.Value.String())
	}
	// A pool nobody sizes has no device.
	unsized := pooled(0)
	unsized.SlowPoolBytes = nil
	slices, err = ClusterSlices([]Node{{"node-a", unsized}}, nil, Options{})
	if err != nil || len(slices) != 21 {
		t.Fatalf("%d slices, %v", len(slices), err)
	}
}

func TestInputOutOfBoundsIsRefused(t *testing.T) {
	big := v1alpha1.MaxBytes
	neg := int64(-1)
	long := strings.Repeat("a", 64)
	cases := map[string]func(*v1alpha1.NodeCapacity, *string, *Options){
		"no ways":            func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.LLCWays = 0 },
		"65 ways":            func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.LLCWays = 65 },
		"negative dram":      func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.DRAMBytes = -1 },
		"2^52 dram":          func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.DRAMBytes = big },
		"2^52 slow":          func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.SlowBytes = big },
		"2^52 pool":          func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.SlowPool, c.SlowPoolBytes = "p", &big },
		"negative pool":      func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.SlowPool, c.SlowPoolBytes = "p", &neg },
		"pool name 64 chars": func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.SlowPool = long },
		"pool name upper":    func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.SlowPool = "Rack" },
		"cpus":               func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.CPUs = 4097 },
		"host kind":          func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.HostKind = "a b" },
		"host kind 64 chars": func(c *v1alpha1.NodeCapacity, _ *string, _ *Options) { c.HostKind = long },
		"node name":          func(_ *v1alpha1.NodeCapacity, n *string, _ *Options) { *n = "Node_A" },
		"node name empty":    func(_ *v1alpha1.NodeCapacity, n *string, _ *Options) { *n = "" },
		"node name 254":      func(_ *v1alpha1.NodeCapacity, n *string, _ *Options) { *n = strings.Repeat("a", 254) },
		"generation":         func(_ *v1alpha1.NodeCapacity, _ *string, o *Options) { o.Generation = -1 },
		"way count 0":        func(_ *v1alpha1.NodeCapacity, _ *string, o *Options) { o.WayCounts = []int{0} },
		"way count 65":       func(_ *v1alpha1.NodeCapacity, _ *string, o *Options) { o.WayCounts = []int{65} },
		"way count twice":    func(_ *v1alpha1.NodeCapacity, _ *string, o *Options) { o.WayCounts = []int{4, 4} },
	}
	for name, spoil := range cases {
		c, node, opts := capacity(48), "node-a", Options{}
		spoil(&c, &node, &opts)
		if s, err := NodeSlices(node, c, opts); err == nil {
			t.Errorf("%s: accepted (%d slices)", name, len(s))
		}
	}
	// The largest numbers the contract allows are accepted and stay exact.
	c := capacity(64)
	c.DRAMBytes, c.SlowBytes = big-1, big-1
	slices, err := NodeSlices(strings.Repeat("a", 253), c, Options{Generation: big - 1})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	if got := memoryDevices(slices)[KindDRAM].Capacity[CapacityBytes]; got.Value.Value() != (big-1)/MiB*MiB {
		t.Fatalf("largest DRAM: %s", got.Value.String())
	}
	if _, err := RackPoolSlices("rack-a", big, Options{}); err == nil {
		t.Fatal("a 2^52-byte pool accepted")
	}
	if _, err := ClusterSlices(nil, map[string]int64{"rack-a": -1}, Options{}); err == nil {
		t.Fatal("a negative configured pool accepted")
	}
	if _, err := ClusterSlices([]Node{{"a", capacity(4)}, {"a", capacity(4)}}, nil, Options{}); err == nil {
		t.Fatal("a node given twice accepted")
	}
}

// The control for valid: kube-apiserver's validation refuses a slice over the limit this
// package keeps to (65 devices that consume counters), so passing it means something.
func TestTheValidationRefusesAnOverfullSlice(t *testing.T) {
	slices, err := NodeSlices("node-a", capacity(48), Options{})
	if err != nil {
		t.Fatal(err)
	}
	over := slices[2].DeepCopy()
	over.Spec.Devices = append(over.Spec.Devices, slices[3].Spec.Devices[0])
	var internal resourceinternal.ResourceSlice
	if err := legacyscheme.Scheme.Convert(over, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceSlice(&internal); len(errs) == 0 {
		t.Fatal("65 counter-consuming devices in one slice passed validation")
	}
}

func TestSliceNamesAreUniqueAndBounded(t *testing.T) {
	long := strings.Repeat("n", 253)
	for _, pool := range []string{"node-a", "node-a-1", long, RackPoolPrefix + "rack-a"} {
		for _, i := range []int{0, 1, 34} {
			name := sliceName("node", pool, i)
			if len(name) > 253 || !dnsName.MatchString(name) {
				t.Fatalf("%q", name)
			}
		}
	}
	if sliceName("node", "a-1", 2) == sliceName("node", "a", 12) {
		t.Fatal("two pools share a slice name")
	}
}
