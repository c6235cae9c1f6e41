package tmcnri

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

const gib = int64(1) << 30

type fixture struct {
	plugin  *Plugin
	rec     *recorder
	plans   string
	resctrl string
	shim    string
}

func newFixture(t *testing.T, withResctrl bool) *fixture {
	t.Helper()
	f := &fixture{rec: newRecorder(), plans: t.TempDir(), shim: t.TempDir()}
	must(t, os.WriteFile(filepath.Join(f.shim, shimName), []byte("\x7fELF"), 0o644))
	cfg := Config{NodeName: "node-a", SysRoot: twoSockets(t), PlanDir: f.plans, ShimDir: f.shim}
	if withResctrl {
		f.resctrl = writeResctrl(t)
		cfg.Resctrl = &Resctrl{Root: f.resctrl}
	}
	f.plugin = New(cfg, f.rec, f.rec)
	return f
}

func placed(node, mask string, ways int, dram, slow int64) map[string]string {
	return map[string]string{PlacementAnnotation: placementJSON(node, mask, ways, dram, slow), LLCMaskAnnotation: mask}
}

func envOf(adj *api.ContainerAdjustment) map[string]string {
	out := map[string]string{}
	for _, kv := range adj.GetEnv() {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestUnplacedPodIsLeftAlone(t *testing.T) {
	f := newFixture(t, true)
	ann := map[string]string{"tmc.dev/workload": "x", LLCMaskAnnotation: "0xff"}
	adj, upd, err := f.plugin.CreateContainer(context.Background(), pod("web", "u1", ann), container("c", "0-3"))
	if adj != nil || upd != nil || err != nil {
		t.Fatalf("an unplaced pod's container was touched: %v %v %v", adj, upd, err)
	}
	if len(f.rec.events) != 0 || len(f.rec.outcomes) != 0 {
		t.Fatalf("reported on an unplaced pod: %v %v", f.rec.events, f.rec.outcomes)
	}
}

func TestPlacedContainerGetsEveryAdjustment(t *testing.T) {
	f := newFixture(t, true)
	p := pod("bfs", "6f1c2a9e-0001", placed("node-a", "0x3c", 4, 4*gib, 2*gib))
	adj, _, err := f.plugin.CreateContainer(context.Background(), p, container("bfs", "2-3"))
	must(t, err)
	rdt := adj.GetLinux().GetRdt()
	if rdt.GetClosId().GetValue() != "tmc-pod-6f1c2a9e-0001" {
		t.Errorf("closID %q", rdt.GetClosId().GetValue())
	}
	if got := rdt.GetSchemata().GetValue(); len(got) != 1 || got[0] != "L3:0=3c;1=3c" {
		t.Errorf("schemata %v", got)
	}
	group, err := os.ReadFile(filepath.Join(f.resctrl, "tmc-pod-6f1c2a9e-0001", "schemata"))
	must(t, err)
	if strings.TrimSpace(string(group)) != "L3:0=3c;1=3c" {
		t.Errorf("the pod's resctrl group holds %q", group)
	}
	// CPUs 2-3 are node1's: its DRAM, and node3, the slow node nearest it.
	if mems := adj.GetLinux().GetResources().GetCpu().GetMems(); mems != "1,3" {
		t.Errorf("cpuset.mems %q, want 1,3", mems)
	}
	if lim := adj.GetLinux().GetResources().GetMemory().GetLimit().GetValue(); lim != 6*gib {
		t.Errorf("memory limit %d", lim)
	}
	env := envOf(adj)
	if env["TMC_PLAN"] != ContainerPlanPath || env["LD_PRELOAD"] != ContainerShimPath {
		t.Errorf("env %v", env)
	}
	mounts := map[string]*api.Mount{}
	for _, m := range adj.GetMounts() {
		mounts[m.Destination] = m
	}
	plan := mounts[ContainerPlanPath]
	if plan == nil || plan.Source != filepath.Join(f.plans, "6f1c2a9e-0001.plan") || !strings.Contains(strings.Join(plan.Options, ","), "ro") {
		t.Fatalf("plan mount %+v", plan)
	}
	text, err := os.ReadFile(plan.Source)
	must(t, err)
	if !strings.Contains(string(text), "fast_node 1\nslow_node 3\n") || !strings.Contains(string(text), "tag edges 2147483648 2147483648\n") {
		t.Errorf("plan file:\n%s", text)
	}
	if m := mounts[ContainerShimPath]; m == nil || m.Source != filepath.Join(f.shim, shimName) {
		t.Errorf("shim mount %+v", m)
	}
	var rec Record
	data, err := os.ReadFile(filepath.Join(f.plans, RecordDir, "6f1c2a9e-0001", "bfs.json"))
	must(t, err)
	must(t, json.Unmarshal(data, &rec))
	if !rec.Complete || rec.Started || len(rec.Skipped) != 0 || rec.LLCMask != "0x3c" {
		t.Errorf("record %+v", rec)
	}
	// Started only once the runtime confirmed it created the container with the adjustment.
	created := container("bfs", "2-3", "TMC_PLAN="+ContainerPlanPath)
	must(t, f.plugin.PostStartContainer(context.Background(), p, created))
	data, _ = os.ReadFile(filepath.Join(f.plans, RecordDir, "6f1c2a9e-0001", "bfs.json"))
	must(t, json.Unmarshal(data, &rec))
	if rec.Started || rec.Confirmed {
		t.Error("an unconfirmed record says the container started")
	}
	must(t, f.plugin.PostCreateContainer(context.Background(), p, created))
	must(t, f.plugin.PostStartContainer(context.Background(), p, created))
	data, _ = os.ReadFile(filepath.Join(f.plans, RecordDir, "6f1c2a9e-0001", "bfs.json"))
	must(t, json.Unmarshal(data, &rec))
	if !rec.Confirmed || !rec.Started {
		t.Errorf("record %+v", rec)
	}
	// A runtime that created it without the adjustment (it stopped waiting) never confirms.
	g := newFixture(t, true)
	q := pod("late", "6f1c2a9e-0002", placed("node-a", "0x3", 2, gib, 0))
	_, _, err = g.plugin.CreateContainer(context.Background(), q, container("late", ""))
	must(t, err)
	must(t, g.plugin.PostCreateContainer(context.Background(), q, container("late", "")))
	data, _ = os.ReadFile(filepath.Join(g.plans, RecordDir, "6f1c2a9e-0002", "late.json"))
	must(t, json.Unmarshal(data, &rec))
	if rec.Confirmed {
		t.Error("a container created without its plan was confirmed")
	}
	// A request the runtime stopped waiting for leaves no record.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := g.plugin.CreateContainer(ctx, pod("gone", "6f1c2a9e-0003", placed("node-a", "0xc", 2, gib, 0)), container("gone", "")); err == nil {
		t.Error("an abandoned request succeeded")
	}
	if _, err := os.Stat(filepath.Join(g.plans, RecordDir, "6f1c2a9e-0003")); !os.IsNotExist(err) {
		t.Error("an abandoned request left a record")
	}
	if f.rec.outcomes[OutcomeAdjusted] != 1 || len(f.rec.events) != 0 {
		t.Errorf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
	}
}

func TestNoResctrlWritesNoRdtAndSaysSo(t *testing.T) {
	f := newFixture(t, false)
	p := pod("bfs", "u2", placed("node-a", "0xf", 4, gib, 0))
	adj, _, err := f.plugin.CreateContainer(context.Background(), p, container("bfs", "0"))
	must(t, err)
	if adj.GetLinux().GetRdt() != nil {
		t.Errorf("RDT written without resctrl: %v", adj.GetLinux().GetRdt())
	}
	// No slow memory given: DRAM of CPU 0's node only.
	if mems := adj.GetLinux().GetResources().GetCpu().GetMems(); mems != "0" {
		t.Errorf("cpuset.mems %q", mems)
	}
	if f.rec.unapplied["llc-mask"] != 1 || f.rec.outcomes[OutcomePartial] != 1 || f.rec.reasons() != "TmcNotApplied" {
		t.Errorf("unapplied %v outcomes %v events %v", f.rec.unapplied, f.rec.outcomes, f.rec.events)
	}
	if !strings.Contains(f.rec.events[0].message, "no L3 CAT through resctrl") {
		t.Errorf("event %q", f.rec.events[0].message)
	}
}

func TestVerificationRunThatCannotBeAppliedFailsCreation(t *testing.T) {
	f := newFixture(t, false)
	ann := placed("node-a", "0xf", 4, gib, 0)
	ann[VerificationRunAnnotation] = "true"
	adj, _, err := f.plugin.CreateContainer(context.Background(), pod("v", "u3", ann), container("v", ""))
	var refused *RefusedError
	if adj != nil || !errors.As(err, &refused) || !strings.Contains(err.Error(), "verification run") {
		t.Fatalf("adj %v err %v", adj, err)
	}
	if _, err := os.Stat(filepath.Join(f.plans, RecordDir, "u3")); !os.IsNotExist(err) {
		t.Error("a refused container left a record")
	}
	// Refused before anything ran: the pod holds nothing, so a later pod may take its ways.
	_, _, err = f.plugin.CreateContainer(context.Background(), pod("w", "u4", placed("node-a", "0xf", 4, gib, 0)), container("w", ""))
	must(t, err)
	// Malformed, for a verification run: refused too.
	bad := map[string]string{PlacementAnnotation: "{", VerificationRunAnnotation: "true"}
	if _, _, err := f.plugin.CreateContainer(context.Background(), pod("v2", "u5", bad), container("v", "")); !errors.As(err, &refused) {
		t.Fatalf("malformed verification run: %v", err)
	}
}

func TestOverlappingMaskIsRefusedAndNothingRunningChanges(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	_, _, err := f.plugin.CreateContainer(ctx, pod("a", "ua", placed("node-a", "0xf0", 4, gib, 0)), container("a", ""))
	must(t, err)
	before, _ := os.ReadFile(filepath.Join(f.resctrl, "tmc-pod-ua", "schemata"))
	// A stale leader's placement onto a's ways.
	adj, upd, err := f.plugin.CreateContainer(ctx, pod("b", "ub", placed("node-a", "0x30", 2, gib, 0)), container("b", ""))
	if adj != nil || upd != nil || err == nil || !strings.Contains(err.Error(), "overlaps default/a") {
		t.Fatalf("overlap admitted: %v %v %v", adj, upd, err)
	}
	after, _ := os.ReadFile(filepath.Join(f.resctrl, "tmc-pod-ua", "schemata"))
	if string(before) != string(after) {
		t.Error("the running pod's group changed")
	}
	if _, err := os.Stat(filepath.Join(f.resctrl, "tmc-pod-ub")); !os.IsNotExist(err) {
		t.Error("the refused pod got a resctrl group")
	}
	if f.rec.outcomes[OutcomeRefused] != 1 || f.rec.reasons() != "TmcPlacementRefused" {
		t.Errorf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
	}
	// a's second container is not checked against a itself.
	_, _, err = f.plugin.CreateContainer(ctx, pod("a", "ua", placed("node-a", "0xf0", 4, gib, 0)), container("sidecar", ""))
	must(t, err)
	// Once a stops, its ways are free.
	must(t, f.plugin.StopPodSandbox(ctx, pod("a", "ua", nil)))
	_, _, err = f.plugin.CreateContainer(ctx, pod("b", "ub", placed("node-a", "0x30", 2, gib, 0)), container("b", ""))
	must(t, err)
}

func TestSplitTheNodeCannotHoldIsRefused(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	// 32 GiB of DRAM and 128 GiB of slow memory on the node.
	_, _, err := f.plugin.CreateContainer(ctx, pod("a", "ua", placed("node-a", "0x1", 1, 20*gib, 100*gib)), container("a", ""))
	must(t, err)
	_, _, err = f.plugin.CreateContainer(ctx, pod("b", "ub", placed("node-a", "0x2", 1, 20*gib, 0)), container("b", ""))
	if err == nil || !strings.Contains(err.Error(), "DRAM") {
		t.Fatalf("DRAM over-commit admitted: %v", err)
	}
	_, _, err = f.plugin.CreateContainer(ctx, pod("c", "uc", placed("node-a", "0x4", 1, gib, 40*gib)), container("c", ""))
	if err == nil || !strings.Contains(err.Error(), "slow memory") {
		t.Fatalf("slow over-commit admitted: %v", err)
	}
	// Slow memory on a node without a slow tier.
	g := newFixture(t, true)
	g.plugin.cfg.SysRoot = writeSysfs(t, []fakeNode{{"0-1", 16 << 20, "10"}})
	_, _, err = g.plugin.CreateContainer(ctx, pod("d", "ud", placed("node-a", "0x1", 1, gib, gib)), container("d", ""))
	if err == nil || !strings.Contains(err.Error(), "no slow NUMA node") {
		t.Fatalf("slow memory on a DRAM-only node admitted: %v", err)
	}
}

func TestPlacementForAnotherNodeIsRefused(t *testing.T) {
	f := newFixture(t, true)
	_, _, err := f.plugin.CreateContainer(context.Background(), pod("a", "ua", placed("node-b", "0x1", 1, gib, 0)), container("a", ""))
	if err == nil || !strings.Contains(err.Error(), `placed on node "node-b"`) {
		t.Fatalf("err %v", err)
	}
}

func TestMalformedPlacementStartsUnadjustedWithAnEvent(t *testing.T) {
	for name, raw := range map[string]string{
		"not json":           "{",
		"schema":             `{"schema":"x"}`,
		"overflowing bytes":  strings.Replace(placementJSON("node-a", "0xf", 4, gib, 0), `"dram_bytes":1073741824`, `"dram_bytes":99999999999999999999999`, 1),
		"non-contiguous":     placementJSON("node-a", "0x5", 2, gib, 0),
		"ways disagree":      placementJSON("node-a", "0xf", 3, gib, 0),
		"extra field":        strings.Replace(placementJSON("node-a", "0xf", 4, gib, 0), `"schema"`, `"evil":1,"schema"`, 1),
		"two values":         placementJSON("node-a", "0xf", 4, gib, 0) + "{}",
		"huge":               strings.Repeat(" ", maxPlacementBytes+1),
		"negative":           strings.Replace(placementJSON("node-a", "0xf", 4, gib, 0), `"vcpus":2`, `"vcpus":-2`, 1),
		"plan over the tier": strings.Replace(placementJSON("node-a", "0xf", 4, gib, 0), `"fast_bytes":536870912`, `"fast_bytes":4503599627370495`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, true)
			adj, upd, err := f.plugin.CreateContainer(context.Background(),
				pod("m", "um", map[string]string{PlacementAnnotation: raw}), container("m", ""))
			if adj != nil || upd != nil || err != nil {
				t.Fatalf("adj %v upd %v err %v", adj, upd, err)
			}
			if f.rec.outcomes[OutcomeMalformed] != 1 || f.rec.reasons() != "TmcPlacementMalformed" {
				t.Errorf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
			}
		})
	}
	// The side annotation must agree with the placement.
	ann := placed("node-a", "0xf", 4, gib, 0)
	ann[LLCMaskAnnotation] = "0xf0"
	if _, err := ParsePlacement(ann); err == nil {
		t.Error("a disagreeing llc-mask annotation was accepted")
	}
}

func TestTheShimIsAlwaysTmcsOwn(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	// A manifest written before the plugin preloaded the shim from a path of its own: tmc's copy
	// takes its place, once.
	adj, _, err := f.plugin.CreateContainer(ctx, pod("old", "uo", placed("node-a", "0x1", 1, gib, 0)),
		container("old", "", "LD_PRELOAD=/opt/tmc/libtmcalloc.so", "TMC_PLAN=/var/lib/tmc/plans/uo.plan"))
	must(t, err)
	if got := envOf(adj)["LD_PRELOAD"]; got != ContainerShimPath {
		t.Errorf("LD_PRELOAD %q, want tmc's shim alone", got)
	}
	// Its old plan path still names the same file the plugin wrote.
	if _, err := os.Stat(filepath.Join(f.plans, "uo.plan")); err != nil {
		t.Error(err)
	}
	// Another preload is kept after the shim.
	adj, _, err = f.plugin.CreateContainer(ctx, pod("p", "up", placed("node-a", "0x2", 1, gib, 0)),
		container("p", "", "LD_PRELOAD=/usr/lib/libjemalloc.so"))
	must(t, err)
	if got := envOf(adj)["LD_PRELOAD"]; got != ContainerShimPath+" /usr/lib/libjemalloc.so" {
		t.Errorf("LD_PRELOAD %q", got)
	}
	// A path merely named like the shim, on a node whose shim is not installed: nothing is
	// preloaded in its name, and the record is not complete (verification does not trust it).
	must(t, os.Remove(filepath.Join(f.shim, shimName)))
	fake := pod("fake", "6f1c2a9e-0f0f", placed("node-a", "0x4", 1, gib, 0))
	adj, _, err = f.plugin.CreateContainer(ctx, fake, container("fake", "", "LD_PRELOAD=/tmp/x/libtmcalloc.so"))
	must(t, err)
	rec, ok := f.plugin.readRecord("6f1c2a9e-0f0f", "fake")
	if !ok || rec.Complete || !strings.Contains(strings.Join(rec.Skipped, ";"), "shim") {
		t.Fatalf("a fake preload was trusted: %+v", rec)
	}
	if _, set := envOf(adj)["LD_PRELOAD"]; set {
		t.Error("LD_PRELOAD set with no shim mounted")
	}
	// A manifest mounting its own file where tmc's shim goes is not trusted either.
	must(t, os.WriteFile(filepath.Join(f.shim, shimName), []byte("\x7fELF"), 0o644))
	own := container("own", "")
	own.Mounts = []*api.Mount{{Destination: ContainerShimPath, Source: "/tmp/evil.so", Type: "bind"}}
	_, _, err = f.plugin.CreateContainer(ctx, pod("own", "6f1c2a9e-0f1f", placed("node-a", "0x8", 1, gib, 0)), own)
	must(t, err)
	if rec, _ := f.plugin.readRecord("6f1c2a9e-0f1f", "own"); rec == nil || rec.Complete {
		t.Fatalf("a manifest's own shim mount was trusted: %+v", rec)
	}
}

// A placed container's memory limit may be lowered after creation, never raised or lifted: the
// node admitted the pod for what its placement holds (crictl update, a pod's resize).
func TestAnUpdateNeverRaisesAPlacedContainersMemory(t *testing.T) {
	f := newFixture(t, false)
	ctx := context.Background()
	p := pod("small", "6f1c2a9e-0c1f", placed("node-a", "0x1", 1, 48<<20, 16<<20))
	c := container("small", "")
	_, _, err := f.plugin.CreateContainer(ctx, p, c)
	must(t, err)
	update := func(limit *int64) error {
		res := &api.LinuxResources{}
		if limit != nil {
			res.Memory = &api.LinuxMemory{Limit: api.Int64(*limit)}
		}
		_, err := f.plugin.UpdateContainer(ctx, p, c, res)
		return err
	}
	for _, v := range []int64{8 * gib, 64<<20 + 1, -1} {
		if err := update(&v); err == nil || !strings.Contains(err.Error(), "was placed with 67108864 bytes") {
			t.Errorf("an update to %d: %v", v, err)
		}
	}
	if f.rec.unapplied["update"] != 3 || !strings.Contains(f.rec.reasons(), "TmcUpdateRefused") {
		t.Errorf("refusals not reported: %v %v", f.rec.unapplied, f.rec.events)
	}
	lower := int64(32 << 20)
	if err := update(&lower); err != nil {
		t.Errorf("lowering refused: %v", err)
	}
	if err := update(nil); err != nil {
		t.Errorf("an update leaving memory alone refused: %v", err)
	}
	// A pod tmc did not place is not tmc's to judge.
	other := pod("plain", "6f1c2a9e-0c2f", nil)
	big := int64(64 * gib)
	res := &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(big)}}
	if _, err := f.plugin.UpdateContainer(ctx, other, container("plain", ""), res); err != nil {
		t.Errorf("an unplaced pod's update refused: %v", err)
	}
}

func TestSynchronizeRebuildsHoldingsAndReportsLateContainers(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	a := pod("a", "ua", placed("node-a", "0xf0", 4, gib, 0))
	_, _, err := f.plugin.CreateContainer(ctx, a, container("a", ""))
	must(t, err)
	must(t, f.plugin.PostCreateContainer(ctx, a, container("a", "", "TMC_PLAN="+ContainerPlanPath)))
	late := pod("late", "ul", placed("node-a", "0x1", 1, 2*gib, 0))
	// A fresh plugin (a restart) learns of both from the runtime.
	g := New(f.plugin.cfg, f.rec, f.rec)
	ca, cl := container("a", ""), container("late", "0-1")
	ca.PodSandboxId, cl.PodSandboxId = a.Id, late.Id
	ca.State, cl.State = api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_RUNNING
	updates, err := g.Synchronize(ctx, []*api.PodSandbox{a, late}, []*api.Container{ca, cl})
	must(t, err)
	if len(updates) != 1 || updates[0].ContainerId != cl.Id {
		t.Fatalf("updates %v", updates)
	}
	res := updates[0].GetLinux().GetResources()
	if res.GetMemory().GetLimit().GetValue() != 2*gib || res.GetCpu().GetMems() != "0" {
		t.Errorf("late container's update %v", res)
	}
	if f.rec.outcomes[OutcomeLate] != 1 || !strings.Contains(f.rec.reasons(), "TmcNotApplied") {
		t.Errorf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
	}
	// What a holds is known again: an overlapping pod is refused.
	_, _, err = g.CreateContainer(ctx, pod("b", "ub", placed("node-a", "0x10", 1, gib, 0)), container("b", ""))
	if err == nil {
		t.Fatal("overlap with a pod known only from Synchronize admitted")
	}
}

func TestRemovePodSandboxRemovesWhatThePluginMade(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	p := pod("a", "ua", placed("node-a", "0xf0", 4, gib, 0))
	_, _, err := f.plugin.CreateContainer(ctx, p, container("a", ""))
	must(t, err)
	must(t, f.plugin.RemovePodSandbox(ctx, p))
	for _, path := range []string{
		filepath.Join(f.plans, "ua.plan"), filepath.Join(f.plans, RecordDir, "ua"), filepath.Join(f.resctrl, "tmc-pod-ua"),
	} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s is still there", path)
		}
	}
}

func TestInstallShimOnlyWhereNoneIs(t *testing.T) {
	dir := t.TempDir()
	bundled := filepath.Join(t.TempDir(), shimName)
	must(t, os.WriteFile(bundled, []byte("image's"), 0o755))
	done, err := InstallShim(bundled, filepath.Join(dir, "shim"))
	must(t, err)
	got, _ := os.ReadFile(filepath.Join(dir, "shim", shimName))
	if !done || string(got) != "image's" {
		t.Fatalf("installed %v: %q", done, got)
	}
	// One the agent built stays.
	must(t, os.WriteFile(filepath.Join(dir, "shim", shimName), []byte("node's"), 0o755))
	done, err = InstallShim(bundled, filepath.Join(dir, "shim"))
	must(t, err)
	got, _ = os.ReadFile(filepath.Join(dir, "shim", shimName))
	if done || string(got) != "node's" {
		t.Fatalf("replaced the node's shim: %v %q", done, got)
	}
	if _, err := InstallShim(filepath.Join(dir, "missing"), filepath.Join(dir, "other")); err == nil {
		t.Error("a missing bundled shim is not an error")
	}
}

// A container's own memory limit is what its pod asked for: the placement never lowers it, at
// creation or when a container created without the plugin is corrected. A container without one
// is held to the placement's bytes when the engine sized them from the pod's request, and to
// none when they are its recommendation's own (a pod that requests no memory).
func TestAContainersOwnMemoryLimitIsNeverLowered(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	withLimit := func(c *api.Container, limit int64) *api.Container {
		c.Linux.Resources.Memory = &api.LinuxMemory{Limit: api.Int64(limit)}
		return c
	}
	// Placed with 64 MiB (a profile's size), the container's own limit 8 GiB: kept.
	p := pod("big", "6f1c2a9e-0b1f", placed("node-a", "0x3", 2, 48<<20, 16<<20))
	adj, _, err := f.plugin.CreateContainer(ctx, p, withLimit(container("big", "0-1"), 8*gib))
	must(t, err)
	if lim := adj.GetLinux().GetResources().GetMemory().GetLimit(); lim != nil {
		t.Errorf("a container's own 8 GiB limit was set to %d", lim.GetValue())
	}
	// Below the placement: kept too (the pod asked for it).
	q := pod("small", "6f1c2a9e-0b2f", placed("node-a", "0xc", 2, 3*gib, gib))
	adj, _, err = f.plugin.CreateContainer(ctx, q, withLimit(container("small", "0-1"), gib))
	must(t, err)
	if lim := adj.GetLinux().GetResources().GetMemory().GetLimit(); lim != nil {
		t.Errorf("a container's own 1 GiB limit was set to %d", lim.GetValue())
	}
	// Placed at its recommendation's own bytes (its pod requests no memory): no limit from them.
	unasked := placed("node-a", "0xc0", 2, 48<<20, 16<<20)
	unasked[PlacementAnnotation] = strings.TrimSuffix(unasked[PlacementAnnotation], "}") + `,"sized_from":"recommendation"}`
	adj, _, err = f.plugin.CreateContainer(ctx, pod("unasked", "6f1c2a9e-0b4f", unasked), container("unasked", "0-1"))
	must(t, err)
	if lim := adj.GetLinux().GetResources().GetMemory().GetLimit(); lim != nil {
		t.Errorf("a container of a pod that asked for no memory was limited to %d", lim.GetValue())
	}
	// Synchronize reads the same rule: a late container with its own limit keeps it.
	g := New(f.plugin.cfg, f.rec, f.rec)
	late := pod("late", "6f1c2a9e-0b3f", placed("node-a", "0x30", 2, 48<<20, 16<<20))
	cl := withLimit(container("late", "0-1"), 8*gib)
	cl.PodSandboxId, cl.State = late.Id, api.ContainerState_CONTAINER_RUNNING
	updates, err := g.Synchronize(ctx, []*api.PodSandbox{late}, []*api.Container{cl})
	must(t, err)
	if len(updates) != 1 || updates[0].GetLinux().GetResources().GetMemory().GetLimit() != nil {
		t.Errorf("a late container's own limit was changed: %v", updates)
	}
	for _, c := range []struct {
		own       int64
		sizedFrom v1alpha1.SizedFrom // "": the placement does not say
		want      int64
		set       bool
	}{
		{0, "", 64 << 20, true}, {0, v1alpha1.SizedFromRequest, 64 << 20, true}, {8 * gib, "", 0, false}, {1, "", 0, false},
		// The recommendation's own bytes, for a pod that asked for none: no limit from them.
		{0, v1alpha1.SizedFromRecommendation, 0, false}, {8 * gib, v1alpha1.SizedFromRecommendation, 0, false},
	} {
		pl := &Placement{Configuration: v1alpha1.PlacedConfiguration{DRAMBytes: 48 << 20, SlowBytes: 16 << 20}}
		if c.sizedFrom != "" {
			pl.SizedFrom = &c.sizedFrom
		}
		if got, set := MemoryLimit(pl, c.own); got != c.want || set != c.set {
			t.Errorf("own %d, sized from %q: %d %v, want %d %v", c.own, c.sizedFrom, got, set, c.want, c.set)
		}
	}
}

// A plugin paused past the runtime's request timeout reads the request on resume with a fresh
// deadline and may answer it after the runtime, which created the container without it, has
// synchronised again: that answer records nothing and releases nothing Synchronize rebuilt.
// A record the runtime never confirmed is removed by Synchronize with the pod's directory.
func TestARequestAnsweredAcrossASynchronisationRecordsNothing(t *testing.T) {
	f := newFixture(t, true)
	p := pod("hung", "6f1c2a9e-0025", placed("node-a", "0x3", 2, gib, 0))
	ctr := container("first", "")
	ctr.PodSandboxId = p.Id
	synced := false
	f.plugin.adjust = func(pl *Placement, n NodeLayout, tg Target) Adjustment {
		if !synced { // Synchronize computes its correction here too
			synced = true
			// The runtime reconnected meanwhile: the container is running without the answer.
			_, err := f.plugin.Synchronize(context.Background(), []*api.PodSandbox{p}, []*api.Container{ctr})
			must(t, err)
		}
		return Adjust(pl, n, tg)
	}
	if _, _, err := f.plugin.CreateContainer(context.Background(), p, ctr); err == nil || !strings.Contains(err.Error(), "synchronised") {
		t.Fatalf("an answer across a synchronisation: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.plans, RecordDir, "6f1c2a9e-0025")); !os.IsNotExist(err) {
		t.Error("an answer across a synchronisation left a record")
	}
	f.plugin.mu.Lock()
	_, held := f.plugin.pods["6f1c2a9e-0025"]
	f.plugin.mu.Unlock()
	if !held {
		t.Error("the running pod's hold, rebuilt by Synchronize, was released")
	}
	// Answered before the runtime synchronised (it had stopped waiting): an unconfirmed record,
	// removed with its directory by the synchronisation.
	f.plugin.adjust = Adjust
	q := pod("late", "6f1c2a9e-0026", placed("node-a", "0xc", 2, gib, 0))
	late := container("late", "")
	late.PodSandboxId = q.Id
	_, _, err := f.plugin.CreateContainer(context.Background(), q, late)
	must(t, err)
	_, err = f.plugin.Synchronize(context.Background(), []*api.PodSandbox{p, q}, []*api.Container{ctr, late})
	must(t, err)
	if _, err := os.Stat(filepath.Join(f.plans, RecordDir, "6f1c2a9e-0026")); !os.IsNotExist(err) {
		t.Error("a record the runtime never confirmed outlived the synchronisation")
	}
}
