package drapublish

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/dra"
	"tmc.dev/scheduler-plugin/pkg/tmc"
)

const gib = int64(1) << 30

func node(name string, ways int, dram int64, extra map[string]string) *corev1.Node {
	ann := map[string]string{
		"tmc.dev/llc-ways":   strconv.Itoa(ways),
		"tmc.dev/dram-bytes": strconv.FormatInt(dram, 10),
	}
	for k, v := range extra {
		ann[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID("uid-" + name), Annotations: ann,
		Labels: map[string]string{HostnameLabel: name},
	}}
}

// stored is the desired slices as the API server would hold them: a resourceVersion, a UID.
func stored(slices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	out := make([]resourceapi.ResourceSlice, len(slices))
	for i, s := range slices {
		s = *s.DeepCopy()
		s.ResourceVersion = "7"
		s.UID = types.UID("slice-" + s.Name)
		out[i] = s
	}
	return out
}

func desired(t *testing.T, nodes ...*corev1.Node) []resourceapi.ResourceSlice {
	t.Helper()
	out, skipped, err := Desired(nodes, map[string]int64{}, dra.Options{})
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	return out
}

func TestStoredSlicesThatMatchAreLeftAlone(t *testing.T) {
	want := desired(t, node("node-a", 8, 4*gib, nil))
	if c := Diff(nil, want); len(c.Create) != len(want) || len(c.Update)+len(c.Delete) != 0 {
		t.Fatalf("from nothing: %+v", c)
	}
	have := stored(Diff(nil, want).Create)
	if c := Diff(have, want); !c.Empty() {
		t.Fatalf("unchanged slices rewritten: %d creates, %d updates, %d deletes", len(c.Create), len(c.Update), len(c.Delete))
	}
	// A quantity stored in another form is the same quantity.
	dram := have[0].Spec.Devices[1]
	if dram.Name != dra.DeviceDRAM {
		t.Fatalf("device %s", dram.Name)
	}
	dram.Capacity[dra.CapacityBytes] = resourceapi.DeviceCapacity{
		Value:         resource.MustParse("4096Mi"),
		RequestPolicy: dram.Capacity[dra.CapacityBytes].RequestPolicy,
	}
	if c := Diff(have, want); !c.Empty() {
		t.Fatalf("a quantity's form made a change: %+v", c)
	}
}

func TestAChangedPoolIsWrittenWholeAtAHigherGeneration(t *testing.T) {
	have := stored(Diff(nil, desired(t, node("node-a", 8, 4*gib, nil), node("node-b", 4, 4*gib, nil))).Create)
	for _, s := range have {
		if s.Spec.Pool.Generation != 1 {
			t.Fatalf("first generation %d", s.Spec.Pool.Generation)
		}
	}
	// node-a grows to 16 ways: its slice is rewritten at the next generation; node-b unchanged.
	want := desired(t, node("node-a", 16, 4*gib, nil), node("node-b", 4, 4*gib, nil))
	c := Diff(have, want)
	if len(c.Delete) != 0 || len(c.Create) != 0 || len(c.Update) != 1 {
		t.Fatalf("%d creates, %d updates, %d deletes", len(c.Create), len(c.Update), len(c.Delete))
	}
	s := c.Update[0]
	if s.Spec.Pool.Name != "node-a" || s.Spec.Pool.Generation != 2 || s.Spec.Pool.ResourceSliceCount != 1 || s.ResourceVersion != "7" {
		t.Fatalf("%s: pool %+v, resourceVersion %q", s.Name, s.Spec.Pool, s.ResourceVersion)
	}
	if ways := s.Spec.Devices[0].Capacity[dra.CapacityWays].Value; ways.Value() != 16 {
		t.Fatalf("ways %s", ways.String())
	}
	// A pool stored in more slices than wanted (as a publisher of per-run devices left it):
	// the surplus slices go, the first is rewritten at the next generation.
	after := stored(c.Update)
	for i := 1; i <= 2; i++ {
		extra := *after[0].DeepCopy()
		extra.Name = fmt.Sprintf("tmc-node-node-a-%d", i)
		extra.UID = types.UID("slice-" + extra.Name)
		after = append(after, extra)
	}
	for i := range after {
		after[i].Spec.Pool.ResourceSliceCount = 3
	}
	for _, s := range have {
		if s.Spec.Pool.Name == "node-b" {
			after = append(after, s)
		}
	}
	c = Diff(after, desired(t, node("node-a", 8, 4*gib, nil), node("node-b", 4, 4*gib, nil)))
	if len(c.Delete) != 2 || c.Delete[0].Name != "tmc-node-node-a-1" || c.Delete[1].UID != "slice-tmc-node-node-a-2" || len(c.Update) != 1 {
		t.Fatalf("%+v", c)
	}
	if c.Update[0].Spec.Pool.Generation != 3 || c.Update[0].Spec.Pool.ResourceSliceCount != 1 {
		t.Fatalf("pool %+v", c.Update[0].Spec.Pool)
	}
}

func TestPoolsGoneAreDeletedAndOtherDriversNeverTouched(t *testing.T) {
	have := stored(Diff(nil, desired(t, node("node-a", 4, 4*gib, nil), node("node-b", 4, 4*gib, nil))).Create)
	other := resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-a", UID: "gpu"},
		Spec:       resourceapi.ResourceSliceSpec{Driver: "gpu.example.com", Pool: resourceapi.ResourcePool{Name: "node-a"}},
	}
	c := Diff(append(have, other), desired(t, node("node-b", 4, 4*gib, nil)))
	if len(c.Create)+len(c.Update) != 0 || len(c.Delete) != 1 {
		t.Fatalf("%+v", c)
	}
	for _, d := range c.Delete {
		if !strings.HasPrefix(d.Name, "tmc-node-node-a-") {
			t.Fatalf("deleted %s", d.Name)
		}
	}
	// Nothing desired: every tmc.dev slice goes, the other driver's stays.
	c = Diff(append(have, other), nil)
	if len(c.Delete) != len(have) {
		t.Fatalf("%d deletes of %d", len(c.Delete), len(have))
	}
	for _, d := range c.Delete {
		if d.Name == other.Name {
			t.Fatal("deleted another driver's slice")
		}
	}
}

func TestAChangedOwnerOrPoolSelectorIsAChange(t *testing.T) {
	pool := map[string]string{"tmc.dev/slow-pool": "rack-a", "tmc.dev/slow-pool-bytes": strconv.FormatInt(64*gib, 10)}
	a, b := node("node-a", 4, 4*gib, pool), node("node-b", 4, 4*gib, pool)
	have := stored(Diff(nil, desired(t, a, b)).Create)
	// The node was deleted and made again under its name: a new UID, a new owner.
	a2 := node("node-a", 4, 4*gib, pool)
	a2.UID = "uid-node-a-again"
	c := Diff(have, desired(t, a2, b))
	if len(c.Update) != 1 || c.Update[0].OwnerReferences[0].UID != "uid-node-a-again" {
		t.Fatalf("%d updates", len(c.Update))
	}
	// node-b leaves the pool: the pool's slice selects node-a alone.
	b2 := node("node-b", 4, 4*gib, nil)
	c = Diff(have, desired(t, a, b2))
	var poolSlice *resourceapi.ResourceSlice
	for i := range c.Update {
		if c.Update[i].Spec.Pool.Name == "rack-pool/rack-a" {
			poolSlice = &c.Update[i]
		}
	}
	if poolSlice == nil {
		t.Fatalf("pool slice not updated: %+v", c)
	}
	if v := poolSlice.Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values; len(v) != 1 || v[0] != "node-a" {
		t.Fatalf("selects %v", v)
	}
}

func TestDesired(t *testing.T) {
	pool := map[string]string{"tmc.dev/slow-pool": "rack-a", "tmc.dev/slow-pool-bytes": strconv.FormatInt(64*gib, 10)}
	a, b, c := node("node-a", 4, 4*gib, pool), node("node-b", 4, 4*gib, pool), node("node-c", 4, 4*gib, nil)
	// node-c carries node-b's hostname: that value would select node-c too, so it is left out.
	c.Labels[HostnameLabel] = "node-b"
	bad := node("node-bad", 4, 4*gib, nil)
	bad.Annotations["tmc.dev/llc-ways"] = "many"
	untiered := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	nodes := []*corev1.Node{c, bad, untiered, b, a}
	out, skipped, err := Desired(nodes, map[string]int64{"rack-a": 32 * gib}, dra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || skipped[0].Node != "node-bad" {
		t.Fatalf("skipped %+v", skipped)
	}
	want, err := dra.ClusterSlices([]dra.Node{
		{Name: "node-a", Capacity: capacity(t, a)}, {Name: "node-b", Capacity: capacity(t, b)}, {Name: "node-c", Capacity: capacity(t, c)},
	}, map[string]int64{"rack-a": 32 * gib}, dra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(want) {
		t.Fatalf("%d slices, ClusterSlices makes %d", len(out), len(want))
	}
	for i := range out {
		if out[i].Name != want[i].Name {
			t.Fatalf("slice %d: %s, not %s", i, out[i].Name, want[i].Name)
		}
		if out[i].Spec.NodeName != nil {
			if o := out[i].OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].Name != *out[i].Spec.NodeName || o[0].UID != types.UID("uid-"+o[0].Name) {
				t.Fatalf("%s: owners %+v", out[i].Name, o)
			}
			continue
		}
		if len(out[i].OwnerReferences) != 0 {
			t.Fatalf("pool slice owned: %+v", out[i].OwnerReferences)
		}
		if v := out[i].Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0]; v.Key != HostnameLabel || len(v.Values) != 1 || v.Values[0] != "node-a" {
			t.Fatalf("pool selects %+v", v)
		}
		if got := out[i].Spec.Devices[0].Capacity[dra.CapacityBytes].Value; got.Value() != 32*gib {
			t.Fatalf("pool of %s", got.String())
		}
	}
	if lost := Unselectable(nodes, out); len(lost) != 1 || !strings.HasPrefix(lost[0], "node-b ") {
		t.Fatalf("unselectable %v", lost)
	}
	// No member selectable at all: no pool slice.
	a.Labels = nil
	out, _, _ = Desired([]*corev1.Node{a, b, c}, nil, dra.Options{})
	for _, s := range out {
		if s.Spec.NodeName == nil {
			t.Fatalf("pool slice %s selects %+v", s.Name, s.Spec.NodeSelector)
		}
	}
	// An invalid pool size of the operator's fails the whole set.
	if _, _, err := Desired(nil, map[string]int64{"Rack": gib}, dra.Options{}); err == nil {
		t.Fatal("accepted an invalid pool name")
	}
}

func capacity(t *testing.T, n *corev1.Node) v1alpha1.NodeCapacity {
	t.Helper()
	c, err := tmc.ReadNodeCapacity(n)
	if err != nil || c == nil {
		t.Fatal(n.Name, err)
	}
	return *c
}
