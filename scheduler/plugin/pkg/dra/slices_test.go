package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// devices checks that a node's pool is one slice of this node and returns its devices by kind.
func devices(t *testing.T, node string, slices []resourceapi.ResourceSlice) map[string]resourceapi.Device {
	t.Helper()
	if len(slices) != 1 {
		t.Fatalf("%d slices", len(slices))
	}
	s := slices[0]
	if s.Name != "tmc-node-"+node+"-0" || s.Spec.Driver != DriverName || s.Spec.Pool.Name != node ||
		s.Spec.NodeName == nil || *s.Spec.NodeName != node || s.Spec.Pool.ResourceSliceCount != 1 {
		t.Fatalf("%s: %+v", s.Name, s.Spec)
	}
	if len(s.Spec.SharedCounters) != 0 {
		t.Fatalf("%s: counters %v", s.Name, s.Spec.SharedCounters)
	}
	out := map[string]resourceapi.Device{}
	for _, d := range s.Spec.Devices {
		k := *d.Attributes[AttrKind].StringValue
		if _, twice := out[k]; twice {
			t.Fatalf("two devices of kind %s", k)
		}
		if len(d.ConsumesCounters) != 0 {
			t.Fatalf("%s consumes counters", d.Name)
		}
		out[k] = d
	}
	return out
}

// wayPolicy checks the LLC-way device holds the node's ways, shared, taken whole: 1..ways.
func wayPolicy(t *testing.T, d resourceapi.Device, ways int64) {
	t.Helper()
	c, ok := d.Capacity[CapacityWays]
	if d.Name != DeviceWays || !ok || len(d.Capacity) != 1 || c.Value.Value() != ways ||
		d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Fatalf("way device %+v", d)
	}
	p := c.RequestPolicy
	if p == nil || p.Default.Value() != 1 || p.ValidRange == nil || p.ValidRange.Min.Value() != 1 ||
		p.ValidRange.Max.Value() != ways || len(p.ValidValues) != 0 {
		t.Fatalf("way request policy %+v", p)
	}
	if step := p.ValidRange.Step; (ways > 1) != (step != nil) || (step != nil && step.Value() != 1) {
		t.Fatalf("%d ways: step %v", ways, step)
	}
}

func TestANodeIsOneSliceOfItsWaysAsACountAndItsMemory(t *testing.T) {
	slices, err := NodeSlices("node-a", capacity(48), Options{Generation: 3})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	got := devices(t, "node-a", slices)
	if len(got) != 3 || slices[0].Spec.Pool.Generation != 3 {
		t.Fatalf("devices %v", got)
	}
	wayPolicy(t, got[KindLLCWays], 48)
	for kind, d := range got {
		if *d.Attributes[AttrHostKind].StringValue != "optane-48" {
			t.Fatalf("%s: attributes %v", kind, d.Attributes)
		}
	}
}

func TestEveryWayCountTheContractAllowsIsOneValidDevice(t *testing.T) {
	for _, ways := range []int{1, 2, 12, 48, 64} {
		slices, err := NodeSlices("node-a", capacity(ways), Options{})
		if err != nil {
			t.Fatal(err)
		}
		valid(t, slices)
		wayPolicy(t, devices(t, "node-a", slices)[KindLLCWays], int64(ways))
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
	// neither tier the slice holds the way device alone.
	c.DRAMBytes = 2*MiB - 1
	slices, err = NodeSlices("dram-only", c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	valid(t, slices)
	if mem := memoryDevices(slices); len(mem) != 0 || len(slices) != 1 || len(slices[0].Spec.Devices) != 1 {
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
	if len(slices) != 3+1 {
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
	if err != nil || len(slices) != 1 {
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

// The controls for valid: kube-apiserver's validation refuses the way device of a one-way node
// with a step (one step above the minimum does not fit in the capacity), a request policy on a
// device not shared, and a request larger than the node's ways as the range's maximum; passing
// it means something.
func TestTheValidationRefusesWhatTheWayDeviceKeepsClearOf(t *testing.T) {
	spoil := map[string]func(*resourceapi.Device){
		"step": func(d *resourceapi.Device) {
			d.Capacity[CapacityWays].RequestPolicy.ValidRange.Step = resource.NewQuantity(1, resource.DecimalSI)
		},
		"not shared": func(d *resourceapi.Device) { d.AllowMultipleAllocations = nil },
		"max": func(d *resourceapi.Device) {
			d.Capacity[CapacityWays].RequestPolicy.ValidRange.Max = resource.NewQuantity(2, resource.DecimalSI)
		},
	}
	for name, f := range spoil {
		slices, err := NodeSlices("node-a", capacity(1), Options{})
		if err != nil {
			t.Fatal(err)
		}
		valid(t, slices)
		over := slices[0].DeepCopy()
		f(&over.Spec.Devices[0])
		var internal resourceinternal.ResourceSlice
		if err := legacyscheme.Scheme.Convert(over, &internal, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateResourceSlice(&internal); len(errs) == 0 {
			t.Errorf("%s: passed validation", name)
		}
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
