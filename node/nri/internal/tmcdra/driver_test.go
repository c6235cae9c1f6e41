package tmcdra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"tmc.dev/node-nri/internal/tmcnri"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

const node = "node-a"

// fakeResctrl is a resctrl tree of plain files: 12 ways, two cache domains.
func fakeResctrl(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "info", "L3"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "info", "L3", "cbm_mask"), []byte("fff\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "info", "L3", "min_cbm_bits"), []byte("1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "schemata"), []byte("L3:0=fff;1=fff\n"), 0o644))
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newDriver(t *testing.T, dataDir, cdiDir, resctrl string, ways int) *Driver {
	t.Helper()
	d, err := New(Config{NodeName: node, DataDir: dataDir, CDIDir: cdiDir, Resctrl: &tmcnri.Resctrl{Root: resctrl}, Ways: ways})
	must(t, err)
	return d
}

// claim is a claim allocated on node: `ways` ways and dram bytes, reserved for pod.
func claim(uid string, ways string, dram string, pod string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "ways/c0", Driver: dra.DriverName, Pool: node, Device: dra.DeviceWays,
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityWays: resource.MustParse(ways)}},
				{Request: "dram/c0", Driver: dra.DriverName, Pool: node, Device: dra.DeviceDRAM,
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityBytes: resource.MustParse(dram)}},
			}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: types.UID(pod)}},
		},
	}
}

func prepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	out, err := d.PrepareResourceClaims(context.Background(), claims)
	must(t, err)
	return out
}

func checkpoint(t *testing.T, dataDir string) *tmcnri.DRACheckpoint {
	t.Helper()
	c, err := tmcnri.ReadDRACheckpoint(filepath.Join(dataDir, tmcnri.DRACheckpointName))
	must(t, err)
	return c
}

func TestPrepareIsIdempotentAndWritesTheClaimsCDISpec(t *testing.T) {
	data, cdi := t.TempDir(), t.TempDir()
	d := newDriver(t, data, cdi, "", 12)
	a := claim("a-1", "4", "192Mi", "pod-1")
	first := prepare(t, d, a)["a-1"]
	must(t, first.Err)
	again := prepare(t, d, a)["a-1"]
	must(t, again.Err)
	if len(first.Devices) != 2 || first.Devices[0].CDIDeviceIDs[0] != "tmc.dev/claim=a-1" {
		t.Fatalf("devices %+v", first.Devices)
	}
	if b, _ := json.Marshal(first.Devices); string(b) != func() string { b2, _ := json.Marshal(again.Devices); return string(b2) }() {
		t.Fatalf("a second prepare answered differently: %+v vs %+v", first.Devices, again.Devices)
	}
	c := checkpoint(t, data)
	if got := c.Claims["a-1"]; got.Run != (dra.Run{First: 0, Count: 4}) || got.DRAMBytes != 192<<20 || len(got.Pods) != 1 {
		t.Fatalf("checkpointed %+v", got)
	}
	spec, err := os.ReadFile(filepath.Join(cdi, "tmc.dev-claim_a-1.json"))
	must(t, err)
	if !strings.Contains(string(spec), `"TMC_DRA_ALLOCATION=a-1"`) || !strings.Contains(string(spec), `"kind": "tmc.dev/claim"`) {
		t.Fatalf("CDI spec %s", spec)
	}
	// The placement tmc-nri applies from it.
	pl := c.DRAPlacement(node, c.Claims["a-1"])
	if pl.LLCMask != "0xf" || pl.Configuration.DRAMBytes != 192<<20 || pl.Configuration.LLCWays != 4 {
		t.Fatalf("placement %+v", pl)
	}
}

func TestASharedClaimPreparedForItsNextPodIsTakenByBoth(t *testing.T) {
	data, cdi := t.TempDir(), t.TempDir()
	d := newDriver(t, data, cdi, "", 12)
	a := claim("a-1", "4", "64Mi", "pod-1")
	must(t, prepare(t, d, a)["a-1"].Err)
	a.Status.ReservedFor = append(a.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "q", UID: "pod-2"})
	must(t, prepare(t, d, a)["a-1"].Err)
	got := checkpoint(t, data).Claims["a-1"]
	if strings.Join(got.Pods, ",") != "pod-1,pod-2" || got.Run != (dra.Run{First: 0, Count: 4}) {
		t.Fatalf("after the second pod: %+v", got)
	}
}

func TestARestartedPluginKeepsTheHeldRuns(t *testing.T) {
	data, cdi := t.TempDir(), t.TempDir()
	must(t, prepare(t, newDriver(t, data, cdi, "", 12), claim("a-1", "4", "64Mi", "p1"))["a-1"].Err)
	restarted := newDriver(t, data, cdi, "", 12)
	must(t, prepare(t, restarted, claim("b-2", "3", "64Mi", "p2"))["b-2"].Err)
	c := checkpoint(t, data)
	if c.Claims["a-1"].Run != (dra.Run{First: 0, Count: 4}) || c.Claims["b-2"].Run != (dra.Run{First: 4, Count: 3}) {
		t.Fatalf("runs %+v", c.Claims)
	}
	// A node whose way count changed under its checkpoint is refused at start.
	if _, err := New(Config{NodeName: node, DataDir: data, CDIDir: cdi, Ways: 8}); err == nil {
		t.Fatal("a checkpoint on 12 ways was taken on 8")
	}
}

func TestACountThatDoesNotFitIsRefused(t *testing.T) {
	data, cdi := t.TempDir(), t.TempDir()
	d := newDriver(t, data, cdi, "", 12)
	must(t, prepare(t, d, claim("a-1", "8", "64Mi", "p1"))["a-1"].Err)
	got := prepare(t, d, claim("b-2", "5", "64Mi", "p2"))["b-2"]
	if got.Err == nil || !strings.Contains(got.Err.Error(), "do not fit") {
		t.Fatalf("8 + 5 ways on 12 prepared: %v", got.Err)
	}
	if _, ok := checkpoint(t, data).Claims["b-2"]; ok {
		t.Fatal("the refused claim was checkpointed")
	}
	if _, err := os.Stat(filepath.Join(cdi, "tmc.dev-claim_b-2.json")); !os.IsNotExist(err) {
		t.Fatal("the refused claim has a CDI spec")
	}
}

func TestUnboundedNumbersAreRefused(t *testing.T) {
	for name, c := range map[string]*resourceapi.ResourceClaim{
		"65 ways":        claim("x-1", "65", "64Mi", "p"),
		"0 ways":         claim("x-1", "0", "64Mi", "p"),
		"half a way":     claim("x-1", "1500m", "64Mi", "p"),
		"2^52 bytes":     claim("x-1", "2", "4Pi", "p"),
		"part of a MiB":  claim("x-1", "2", "1000", "p"),
		"negative bytes": claim("x-1", "2", "-64Mi", "p"),
	} {
		d := newDriver(t, t.TempDir(), t.TempDir(), "", 12)
		if got := prepare(t, d, c)["x-1"]; got.Err == nil {
			t.Errorf("%s: prepared", name)
		}
	}
	foreign := claim("x-1", "2", "64Mi", "p")
	foreign.Status.Allocation.Devices.Results[0].Pool = "node-b"
	if _, err := Read(foreign, node); err == nil {
		t.Error("a device in another node's pool was read")
	}
	unallocated := claim("x-1", "2", "64Mi", "p")
	unallocated.Status.Allocation = nil
	if _, err := Read(unallocated, node); err == nil {
		t.Error("an unallocated claim was read")
	}
}

func TestUnprepareReleasesTheRunAndIsIdempotent(t *testing.T) {
	data, cdi, rdt := t.TempDir(), t.TempDir(), fakeResctrl(t)
	d := newDriver(t, data, cdi, rdt, 0)
	must(t, prepare(t, d, claim("a-1", "4", "64Mi", "p1"))["a-1"].Err)
	must(t, os.Mkdir(filepath.Join(rdt, tmcnri.DRAGroup("a-1")), 0o755))
	for range 2 {
		out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "a-1"}})
		must(t, err)
		must(t, out["a-1"])
	}
	if len(checkpoint(t, data).Claims) != 0 {
		t.Fatal("the run is still held")
	}
	for _, p := range []string{filepath.Join(cdi, "tmc.dev-claim_a-1.json"), filepath.Join(rdt, tmcnri.DRAGroup("a-1"))} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s is still there", p)
		}
	}
	// The ways are free again: 12 fit.
	must(t, prepare(t, d, claim("b-2", "12", "64Mi", "p2"))["b-2"].Err)
}

func TestCompactionRewritesTheMovedGroupsSchemata(t *testing.T) {
	data, cdi, rdt := t.TempDir(), t.TempDir(), fakeResctrl(t)
	d := newDriver(t, data, cdi, rdt, 0)
	for _, c := range []*resourceapi.ResourceClaim{claim("a-1", "3", "64Mi", "p1"), claim("b-2", "3", "64Mi", "p2"), claim("c-3", "3", "64Mi", "p3")} {
		must(t, prepare(t, d, c)[c.UID].Err)
	}
	// tmc-nri made c-3's group when its container was created.
	rt := &tmcnri.Resctrl{Root: rdt}
	must(t, rt.EnsureGroup(tmcnri.DRAGroup("c-3"), "L3:0=1c0;1=1c0"))
	_, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "b-2"}})
	must(t, err)
	// Free: ways 3..5 and 9..11. Six ways fit once c-3 (6..8) moves: up to 9..11 leaves the
	// lower run 3..8.
	must(t, prepare(t, d, claim("d-4", "6", "64Mi", "p4"))["d-4"].Err)
	c := checkpoint(t, data)
	if c.Claims["a-1"].Run != (dra.Run{First: 0, Count: 3}) || c.Claims["c-3"].Run != (dra.Run{First: 9, Count: 3}) ||
		c.Claims["d-4"].Run != (dra.Run{First: 3, Count: 6}) {
		t.Fatalf("runs %+v", c.Claims)
	}
	got, err := os.ReadFile(filepath.Join(rdt, tmcnri.DRAGroup("c-3"), "schemata"))
	must(t, err)
	if strings.TrimSpace(string(got)) != "L3:0=e00;1=e00" {
		t.Fatalf("c-3's schemata after the move: %q", got)
	}
	// a-1 did not move, and has no group yet: none is made for it.
	if _, err := os.Stat(filepath.Join(rdt, tmcnri.DRAGroup("a-1"))); !os.IsNotExist(err) {
		t.Fatal("a group was made for a claim with no container")
	}
	// A way count that disagrees with cbm_mask is refused at start.
	if _, err := New(Config{NodeName: node, DataDir: t.TempDir(), CDIDir: cdi, Resctrl: rt, Ways: 11}); err == nil {
		t.Fatal("--ways 11 on a 12-way cbm_mask was taken")
	}
}
