package tmcnri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"tmc.dev/scheduler-plugin/pkg/dra"
)

// draFixture is the plugin with a checkpoint of one prepared claim, c-1: ways 2..5 of the
// fake resctrl's 11, 4 GiB of DRAM and 2 GiB of slow memory, reserved for the pod uid pod-1.
func draFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	f := newFixture(t, true)
	path := filepath.Join(t.TempDir(), DRACheckpointName)
	must(t, WriteDRACheckpoint(path, &DRACheckpoint{Version: 1, Ways: 11, Claims: map[string]DRAClaim{
		"c-1": {Namespace: "default", Name: "bfs-ways", Pods: []string{"pod-1"}, Run: dra.Run{First: 2, Count: 4},
			DRAMBytes: 4 * gib, SlowBytes: 2 * gib},
	}}))
	f.plugin.cfg.DRACheckpoint = path
	return f, path
}

func TestAContainerNamingAPreparedClaimGetsItsConfiguration(t *testing.T) {
	f, _ := draFixture(t)
	adj, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "pod-1", nil),
		container("bfs", "2-3", DRAClaimEnv+"=c-1"))
	must(t, err)
	rdt := adj.GetLinux().GetRdt()
	if rdt.GetClosId().GetValue() != "tmc-claim-c-1" || rdt.GetSchemata().GetValue()[0] != "L3:0=3c;1=3c" {
		t.Errorf("intelRdt %v", rdt)
	}
	group, err := os.ReadFile(filepath.Join(f.resctrl, "tmc-claim-c-1", "schemata"))
	must(t, err)
	if strings.TrimSpace(string(group)) != "L3:0=3c;1=3c" {
		t.Errorf("the claim's group holds %q", group)
	}
	if mems := adj.GetLinux().GetResources().GetCpu().GetMems(); mems != "1,3" {
		t.Errorf("cpuset.mems %q", mems)
	}
	// The claim's 6 GiB are the recommendation's size, not the pod's request (which the node
	// cannot see): no limit from them, so none below what the pod asked for.
	if lim := adj.GetLinux().GetResources().GetMemory().GetLimit(); lim != nil {
		t.Errorf("memory limit %d from the claim", lim.GetValue())
	}
	if envOf(adj)["TMC_PLAN"] != ContainerPlanPath {
		t.Errorf("env %v", envOf(adj))
	}
}

func TestAClaimNotPreparedOrNotReservedForThePodIsRefused(t *testing.T) {
	f, path := draFixture(t)
	for name, tc := range map[string]struct{ uid, claim string }{
		"another pod's claim": {"pod-2", "c-1"},
		"not prepared":        {"pod-1", "c-9"},
		"not a uid":           {"pod-1", "../c-1"},
	} {
		_, _, err := f.plugin.CreateContainer(context.Background(), pod("x", tc.uid, nil), container("x", "0", DRAClaimEnv+"="+tc.claim))
		var refused *RefusedError
		if !errors.As(err, &refused) {
			t.Errorf("%s: created (%v)", name, err)
		}
	}
	must(t, os.Remove(path))
	_, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "pod-1", nil), container("bfs", "0", DRAClaimEnv+"=c-1"))
	if err == nil {
		t.Error("created with no checkpoint")
	}
}

func TestACheckpointOutOfBoundsIsNotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), DRACheckpointName)
	for name, text := range map[string]string{
		"overlap":   `{"version":1,"ways":8,"claims":{"a":{"run":{"first":0,"count":4}},"b":{"run":{"first":3,"count":2}}}}`,
		"beyond":    `{"version":1,"ways":8,"claims":{"a":{"run":{"first":6,"count":4}}}}`,
		"65 ways":   `{"version":1,"ways":65,"claims":{}}`,
		"bytes":     `{"version":1,"ways":8,"claims":{"a":{"run":{"first":0,"count":1},"dram_bytes":4503599627370496}}}`,
		"version":   `{"version":2,"ways":8,"claims":{}}`,
		"not json":  `{"version":1,`,
		"large uid": `{"version":1,"ways":8,"claims":{"` + strings.Repeat("a", 65) + `":{"run":{"first":0,"count":1}}}}`,
	} {
		must(t, os.WriteFile(path, []byte(text), 0o644))
		if _, err := ReadDRACheckpoint(path); err == nil {
			t.Errorf("%s: read", name)
		}
	}
}

// After a restart, the runtime tells the plugin of running containers: one naming a prepared
// claim holds the claim's memory again (a placement that would pass the node's DRAM with it is
// refused), and one created while the plugin was away is corrected and reported, as a placed
// pod's would be.
func TestSynchronizeCountsWhatAClaimsContainersHold(t *testing.T) {
	f, _ := draFixture(t)
	ctx := context.Background()
	claimed := pod("bfs", "pod-1", nil)
	ctr := container("bfs", "2-3", DRAClaimEnv+"=c-1")
	gone := pod("gone", "pod-2", nil)
	lost := container("lost", "0", DRAClaimEnv+"=c-9")
	ctr.PodSandboxId, lost.PodSandboxId = claimed.Id, gone.Id
	ctr.State, lost.State = api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_RUNNING
	g := New(f.plugin.cfg, f.rec, f.rec)
	updates, err := g.Synchronize(ctx, []*api.PodSandbox{claimed, gone}, []*api.Container{ctr, lost})
	must(t, err)
	if len(updates) != 1 || updates[0].ContainerId != ctr.Id {
		t.Fatalf("updates %v", updates)
	}
	res := updates[0].GetLinux().GetResources()
	if res.GetMemory().GetLimit() != nil || res.GetCpu().GetMems() != "1,3" {
		t.Errorf("the late container's update %v", res)
	}
	if f.rec.outcomes[OutcomeLate] != 1 || strings.Count(f.rec.reasons(), "TmcNotApplied") != 2 {
		t.Errorf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
	}
	// The node has 32 GiB of DRAM and the claim holds 4: 29 more do not fit, 28 do.
	_, _, err = g.CreateContainer(ctx, pod("big", "ub", placed("node-a", "0x1", 1, 29*gib, 0)), container("big", ""))
	if err == nil {
		t.Fatal("a placement over the DRAM a claim's running container holds was admitted")
	}
	_, _, err = g.CreateContainer(ctx, pod("fits", "uf", placed("node-a", "0x1", 1, 28*gib, 0)), container("fits", ""))
	must(t, err)
}
