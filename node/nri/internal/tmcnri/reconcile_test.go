package tmcnri

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

// writeCgroups is a cgroup v2 tree as the kubelet's systemd driver lays out a burstable pod:
// the pod's cgroup with its controllers' files, and one container cgroup holding threads.
func writeCgroups(t *testing.T, uid, cpus string, threads ...string) (root, podDir string) {
	t.Helper()
	root = t.TempDir()
	podDir = filepath.Join(root, "kubepods.slice", "kubepods-burstable.slice",
		"kubepods-burstable-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	ctr := filepath.Join(podDir, "cri-containerd-0123abcd.scope")
	must(t, os.MkdirAll(ctr, 0o755))
	for name, text := range map[string]string{
		"memory.max": "max", "cpuset.mems": "", "cpuset.cpus.effective": cpus, "cgroup.threads": "",
	} {
		must(t, os.WriteFile(filepath.Join(podDir, name), []byte(text+"\n"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(ctr, "cgroup.threads"), []byte(strings.Join(threads, "\n")+"\n"), 0o644))
	return root, podDir
}

// runningPod is a pod as the API server lists it, with the tiered pod label; limits, when given,
// are its containers' memory limits (one container each).
func runningPod(name, uid, node string, ann map[string]string, limits ...int64) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID(uid), Annotations: ann, Labels: tieredLabels(),
			CreationTimestamp: metav1.Now(),
		},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: name}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if len(limits) > 0 {
		p.Spec.Containers = nil
		for _, l := range limits {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(l, resource.BinarySI)}}})
		}
	}
	return p
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	return strings.TrimSpace(string(data))
}

func TestReconcileAppliesAPlacementToARunningPodOnce(t *testing.T) {
	uid := "6f1c2a9e-0001"
	root, podDir := writeCgroups(t, uid, "2-3", "101", "102")
	resctrl := writeResctrl(t)
	plans := t.TempDir()
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: resctrl}, CgroupRoot: root, PlanDir: plans}
	pods := []corev1.Pod{
		runningPod("bfs", uid, "node-a", placed("node-a", "0x3c", 4, 4*gib, 2*gib)),
		runningPod("web", "6f1c2a9e-0002", "node-a", nil),                                   // not placed: left alone
		runningPod("far", "6f1c2a9e-0003", "node-b", placed("node-b", "0x3", 2, gib, 0)),    // another node's
		runningPod("gone", "6f1c2a9e-0004", "node-a", placed("node-a", "0x3", 2, gib, 0)),   // no cgroup here
		runningPod("forged", "6f1c2a9e-0005", "node-a", placed("node-b", "0x3", 2, gib, 0)), // placed elsewhere
	}
	first := r.Reconcile(pods)
	if len(first) != 3 {
		t.Fatalf("reconciled %+v", first)
	}
	bfs := first[0]
	if bfs.Pod != "default/bfs" || len(bfs.Written) != 5 || !slices.Equal(bfs.Unapplied, []string{notAtCreation}) {
		t.Fatalf("first round: %+v", bfs)
	}
	// The plan creation would have given the pod, byte for byte, where a pod mounting the plan
	// directory reads it.
	want := Adjust(mustParse(t, pods[0].Annotations), mustLayout(t, r), Target{Pod: "default/bfs", UID: uid, CPUs: []int{2, 3}})
	if got := readTrim(t, filepath.Join(plans, uid+".plan")); got != strings.TrimSpace(want.Plan) || !strings.Contains(got, "fast_node 1") {
		t.Errorf("plan %q, want %q", got, want.Plan)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "6442450944" {
		t.Errorf("memory.max %q", got)
	}
	if got := readTrim(t, filepath.Join(podDir, "cpuset.mems")); got != "1,3" {
		t.Errorf("cpuset.mems %q (CPUs 2-3 are node1's, node3 its slow memory)", got)
	}
	group := filepath.Join(resctrl, GroupPrefix+uid)
	if got := readTrim(t, filepath.Join(group, "schemata")); got != "L3:0=3c;1=3c" {
		t.Errorf("schemata %q", got)
	}
	if got := readTrim(t, filepath.Join(group, "tasks")); got != "101\n102" {
		t.Errorf("tasks %q", got)
	}
	if !strings.Contains(strings.Join(first[1].Unapplied, ";"), "no cgroup of pod") ||
		!strings.Contains(strings.Join(first[2].Unapplied, ";"), `placed on node "node-b"`) {
		t.Errorf("what was not applied is not said: %+v", first[1:])
	}

	// A second round writes nothing; a thread started since joins the group, and only it.
	for _, done := range r.Reconcile(pods) {
		if len(done.Written) != 0 {
			t.Errorf("second round wrote %v for %s", done.Written, done.Pod)
		}
	}
	must(t, os.WriteFile(filepath.Join(podDir, "cri-containerd-0123abcd.scope", "cgroup.threads"), []byte("101\n102\n240\n"), 0o644))
	third := r.Reconcile(pods)
	if !slices.Equal(third[0].Written, []string{"resctrl " + GroupPrefix + uid + " tasks +1"}) {
		t.Errorf("third round wrote %v", third[0].Written)
	}
	if got := readTrim(t, filepath.Join(group, "tasks")); got != "101\n102\n240" {
		t.Errorf("tasks %q", got)
	}
	// Something that drifted (written by someone else) is put back.
	must(t, os.WriteFile(filepath.Join(podDir, "cpuset.mems"), []byte("0-3\n"), 0o644))
	if got := r.Reconcile(pods)[0].Written; !slices.Equal(got, []string{"cpuset.mems 1,3"}) {
		t.Errorf("drift: wrote %v", got)
	}
	must(t, os.WriteFile(filepath.Join(plans, uid+".plan"), []byte("fast_node 0\n"), 0o644))
	if got := r.Reconcile(pods)[0].Written; !slices.Equal(got, []string{"plan " + uid + ".plan"}) {
		t.Errorf("a changed plan: wrote %v", got)
	}

	// Restarted (a new process: nothing remembered), it finds everything as it should be.
	again := &Reconciler{NodeName: "node-a", SysRoot: r.SysRoot, Resctrl: &Resctrl{Root: resctrl}, CgroupRoot: root, PlanDir: plans}
	for _, done := range again.Reconcile(pods) {
		if len(done.Written) != 0 {
			t.Errorf("after a restart wrote %v for %s", done.Written, done.Pod)
		}
	}
}

func mustParse(t *testing.T, ann map[string]string) *Placement {
	t.Helper()
	pl, err := ParsePlacement(ann)
	must(t, err)
	return pl
}

func mustLayout(t *testing.T, r *Reconciler) NodeLayout {
	t.Helper()
	node, err := ReadNodeLayout(r.SysRoot, r.Resctrl)
	must(t, err)
	return node
}

// A malformed placement is said and nothing of it is written; the pod's cgroup stays as the
// kubelet made it.
func TestReconcileWritesNothingForAMalformedPlacement(t *testing.T) {
	uid := "6f1c2a9e-0050"
	root, podDir := writeCgroups(t, uid, "0-1", "9")
	plans, resctrl := t.TempDir(), writeResctrl(t)
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: resctrl}, CgroupRoot: root, PlanDir: plans}
	for _, ann := range []map[string]string{
		{PlacementAnnotation: `{"schema":"tmc.placement/v2","node":"node-a"`},
		{PlacementAnnotation: strings.Replace(placementJSON("node-a", "0x3", 2, gib, 0), `"llc_mask":"0x3"`, `"llc_mask":"0xzz"`, 1)},
	} {
		done := r.Reconcile([]corev1.Pod{runningPod("bad", uid, "node-a", ann)})
		if len(done) != 1 || len(done[0].Written) != 0 || len(done[0].Unapplied) != 1 || !strings.HasPrefix(done[0].Unapplied[0], "placement: ") {
			t.Errorf("%s: %+v", ann[PlacementAnnotation], done)
		}
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "max" {
		t.Errorf("memory.max %s", got)
	}
	if entries, _ := os.ReadDir(plans); len(entries) != 0 {
		t.Errorf("a plan for a malformed placement: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(resctrl, GroupPrefix+uid)); !os.IsNotExist(err) {
		t.Errorf("a resctrl group for a malformed placement: %v", err)
	}
}

// A node with no slow tier: the pod's memory nodes are its CPUs' DRAM only, and its plan names
// that node as both tiers (the shim's limits are moot, the pod runs all in DRAM).
func TestReconcileOnANodeWithoutASlowTier(t *testing.T) {
	uid := "6f1c2a9e-0060"
	root, podDir := writeCgroups(t, uid, "2-3", "11")
	sys := writeSysfs(t, []fakeNode{{"0-1", 16 << 20, "10 21"}, {"2-3", 16 << 20, "21 10"}})
	plans := t.TempDir()
	r := &Reconciler{NodeName: "node-a", SysRoot: sys, CgroupRoot: root, PlanDir: plans}
	done := r.Reconcile([]corev1.Pod{runningPod("dram", uid, "node-a", placed("node-a", "0x3", 2, 2*gib, 0))})
	if len(done) != 1 {
		t.Fatalf("%+v", done)
	}
	if got := readTrim(t, filepath.Join(podDir, "cpuset.mems")); got != "1" {
		t.Errorf("cpuset.mems %q", got)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "2147483648" {
		t.Errorf("memory.max %q", got)
	}
	plan := readTrim(t, filepath.Join(plans, uid+".plan"))
	if !strings.Contains(plan, "fast_node 1") || !strings.Contains(plan, "slow_node 1") {
		t.Errorf("plan %q", plan)
	}
	// No resctrl mount at all: the mask is said not applied, the rest is.
	if !strings.Contains(strings.Join(done[0].Unapplied, ";"), "llc-mask: ") {
		t.Errorf("unapplied %v", done[0].Unapplied)
	}
}

// Without a plan directory nothing is written there and the plan is said not applied.
func TestReconcileWithoutAPlanDirectorySaysSo(t *testing.T) {
	uid := "6f1c2a9e-0070"
	root, _ := writeCgroups(t, uid, "0-1")
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), CgroupRoot: root}
	done := r.Reconcile([]corev1.Pod{runningPod("p", uid, "node-a", placed("node-a", "0x3", 2, gib, gib))})
	if len(done) != 1 || !slices.Contains(done[0].Unapplied, "plan: no plan directory (--plan-dir)") {
		t.Errorf("%+v", done)
	}
}

func TestReconcileKeepsAPodsOwnLimitAndFindsCgroupfsPods(t *testing.T) {
	uid := "6f1c2a9e-0010"
	root := t.TempDir()
	podDir := filepath.Join(root, "kubepods", "burstable", "pod"+uid)
	must(t, os.MkdirAll(podDir, 0o755))
	must(t, os.WriteFile(filepath.Join(podDir, "memory.max"), []byte("1073741824\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(podDir, "cpuset.mems"), []byte("\n"), 0o644))
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), CgroupRoot: root}
	done := r.Reconcile([]corev1.Pod{runningPod("capped", uid, "node-a", placed("node-a", "0x3", 2, 4*gib, 2*gib), gib)})
	// No cpuset.cpus.effective: every CPU, so both DRAM nodes and the slow node nearest them.
	if len(done) != 1 || !slices.Equal(done[0].Written, []string{"cpuset.mems 0-2"}) {
		t.Fatalf("reconciled %+v", done)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "1073741824" {
		t.Errorf("the pod's own limit was changed to %s", got)
	}
	if !strings.Contains(strings.Join(done[0].Unapplied, ";"), "llc-mask: "+ErrNoCAT.Error()) {
		t.Errorf("no resctrl, not said: %v", done[0].Unapplied)
	}
}

func TestReconcileAppliesOnlyTenantsPlacements(t *testing.T) {
	uid := "6f1c2a9e-0020"
	root, podDir := writeCgroups(t, uid, "0-1", "7")
	sel, err := v1alpha1.ParseTenantNamespaceLabels("tmc.dev/tenant=yes")
	must(t, err)
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), CgroupRoot: root, Tenants: sel}
	pods := []corev1.Pod{runningPod("a", uid, "node-a", placed("node-a", "0x3", 2, gib, 0))}
	for _, tc := range []struct {
		namespaces Namespaces
		want       string
	}{
		{nil, "not known yet"},
		{FixedNamespaces{"default": {"other": "x"}}, "not one of tmc's tenant namespaces"},
	} {
		r.Namespaces = tc.namespaces
		done := r.Reconcile(pods)
		if len(done) != 1 || len(done[0].Written) != 0 || !strings.Contains(strings.Join(done[0].Unapplied, ";"), tc.want) {
			t.Errorf("%+v", done)
		}
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "max" {
		t.Errorf("a placement outside the tenants was applied: memory.max %s", got)
	}
	r.Namespaces = FixedNamespaces{"default": {"tmc.dev/tenant": "yes"}}
	if done := r.Reconcile(pods); len(done[0].Written) == 0 {
		t.Errorf("a tenant's placement was not applied: %+v", done)
	}
}

func TestTheNodesPodsFromTheAPIServerOrAList(t *testing.T) {
	here := runningPod("here", "6f1c2a9e-0030", "node-a", placed("node-a", "0x3", 2, gib, 0))
	there := runningPod("there", "6f1c2a9e-0031", "node-b", nil)
	client := fake.NewClientset(&here, &there)
	pods, err := ListPods(context.Background(), client, "node-a")
	must(t, err)
	if len(pods) != 1 || pods[0].Name != "here" {
		t.Errorf("listed %d pods", len(pods))
	}
	path := filepath.Join(t.TempDir(), "pods.json")
	data, err := json.Marshal(corev1.PodList{Items: []corev1.Pod{here, there}})
	must(t, err)
	must(t, os.WriteFile(path, data, 0o644))
	pods, err = ReadPodList(path)
	must(t, err)
	if len(pods) != 2 || pods[0].Annotations[PlacementAnnotation] == "" {
		t.Errorf("read %+v", pods)
	}
	must(t, os.WriteFile(path, []byte(`{"items": 3}`), 0o644))
	if _, err := ReadPodList(path); err == nil || !strings.Contains(err.Error(), "not a pod list") {
		t.Errorf("a malformed list: %v", err)
	}
}

func TestReconcileRemovesTheGroupsOfPodsGone(t *testing.T) {
	resctrl, plans := writeResctrl(t), t.TempDir()
	r := &Reconciler{NodeName: "node-a", Resctrl: &Resctrl{Root: resctrl}, PlanDir: plans}
	for _, name := range []string{"6f1c2a9e-0040.plan", "6f1c2a9e-0041.plan", ".6f1c2a9e-0041.plan.tmp", "notes.txt"} {
		must(t, os.WriteFile(filepath.Join(plans, name), []byte("fast_node 0\n"), 0o644))
	}
	// tmc-nri's records of containers (written at creation) are not the reconcile mode's.
	must(t, os.MkdirAll(filepath.Join(plans, RecordDir, "6f1c2a9e-0041"), 0o755))
	for _, name := range []string{GroupPrefix + "6f1c2a9e-0040", GroupPrefix + "6f1c2a9e-0041", GroupPrefix + "6f1c2a9e-0042", "tmc-profile-1", "other"} {
		must(t, os.MkdirAll(filepath.Join(resctrl, name), 0o755))
		must(t, os.WriteFile(filepath.Join(resctrl, name, "schemata"), []byte("L3:0=1;1=1\n"), 0o644))
	}
	finished := runningPod("done", "6f1c2a9e-0042", "node-a", nil)
	finished.Status.Phase = corev1.PodSucceeded
	pods := []corev1.Pod{runningPod("live", "6f1c2a9e-0040", "node-a", nil), finished}
	removed, err := r.RemoveStale(pods)
	must(t, err)
	if !slices.Equal(removed, []string{GroupPrefix + "6f1c2a9e-0041", GroupPrefix + "6f1c2a9e-0042", "6f1c2a9e-0041.plan"}) {
		t.Errorf("removed %v", removed)
	}
	for name, want := range map[string]bool{"6f1c2a9e-0040.plan": true, "6f1c2a9e-0041.plan": false, ".6f1c2a9e-0041.plan.tmp": true, "notes.txt": true, RecordDir: true} {
		if _, err := os.Stat(filepath.Join(plans, name)); (err == nil) != want {
			t.Errorf("plan dir %s: present %v", name, err == nil)
		}
	}
	for name, want := range map[string]bool{GroupPrefix + "6f1c2a9e-0040": true, "tmc-profile-1": true, "other": true, GroupPrefix + "6f1c2a9e-0041": false} {
		if _, err := os.Stat(filepath.Join(resctrl, name)); (err == nil) != want {
			t.Errorf("%s: present %v", name, err == nil)
		}
	}
	if removed, err := r.RemoveStale(pods); err != nil || len(removed) != 0 {
		t.Errorf("again: %v %v", removed, err)
	}
}

// Without NRI, a running pod a prepared DRA claim is reserved for gets the claim's
// configuration: its memory nodes and its threads in the claim's group, whose ways the node
// plugin set, and no memory limit from the claim's bytes (the recommendation's size, not the
// pod's request); a checkpoint that cannot be read is said for each pod with claims, and
// nothing is written for them.
func TestReconcileAppliesAPreparedClaimToThePodsItIsReservedFor(t *testing.T) {
	uid := "6f1c2a9e-0070"
	root, podDir := writeCgroups(t, uid, "2-3", "301")
	resctrl := writeResctrl(t)
	checkpoint := filepath.Join(t.TempDir(), DRACheckpointName)
	must(t, WriteDRACheckpoint(checkpoint, &DRACheckpoint{Version: 1, Ways: 11, Claims: map[string]DRAClaim{
		"c-1": {Namespace: "default", Name: "bfs-ways", Pods: []string{uid}, Run: dra.Run{First: 2, Count: 4},
			DRAMBytes: 4 * gib, SlowBytes: 2 * gib},
	}}))
	// The node plugin made the claim's group when it prepared it.
	must(t, (&Resctrl{Root: resctrl}).EnsureGroup(DRAGroup("c-1"), "L3:0=3c;1=3c"))
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: resctrl}, CgroupRoot: root,
		PlanDir: t.TempDir(), DRACheckpoint: checkpoint}
	withClaim := runningPod("bfs", uid, "node-a", nil)
	withClaim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "tiers"}}
	pods := []corev1.Pod{withClaim, runningPod("web", "6f1c2a9e-0071", "node-a", nil)}
	first := r.Reconcile(pods)
	if len(first) != 1 || first[0].Pod != "default/bfs" {
		t.Fatalf("reconciled %+v", first)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "max" {
		t.Errorf("memory.max %q", got)
	}
	if got := readTrim(t, filepath.Join(podDir, "cpuset.mems")); got != "1,3" {
		t.Errorf("cpuset.mems %q", got)
	}
	if got := readTrim(t, filepath.Join(resctrl, DRAGroup("c-1"), "tasks")); got != "301" {
		t.Errorf("the claim's group's tasks %q", got)
	}
	if _, err := os.Stat(filepath.Join(resctrl, GroupPrefix+uid)); !os.IsNotExist(err) {
		t.Errorf("a group of the pod's own was made beside the claim's: %v", err)
	}
	for _, done := range r.Reconcile(pods) {
		if len(done.Written) != 0 {
			t.Errorf("second round wrote %v", done.Written)
		}
	}
	// Unreadable: said, and the pod's cgroup left as it is.
	must(t, os.WriteFile(checkpoint, []byte(`{"version":1,`), 0o644))
	must(t, os.WriteFile(filepath.Join(podDir, "memory.max"), []byte("max\n"), 0o644))
	third := r.Reconcile(pods)
	if len(third) != 1 || !strings.Contains(strings.Join(third[0].Unapplied, ";"), "cannot read the prepared claims") {
		t.Errorf("an unreadable checkpoint is not said: %+v", third)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "max" {
		t.Errorf("memory.max written from an unreadable checkpoint: %q", got)
	}
}
