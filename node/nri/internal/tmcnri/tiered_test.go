package tmcnri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// unlabelled are labels that do not make a pod tiered: none, another value, another key.
var unlabelled = map[string]map[string]string{
	"no label":      nil,
	"another value": {v1alpha1.TieredPodLabel: "yes"},
	"another key":   {"app": "kv"},
}

// A valid placement on a pod without the tiered pod label was checked by no admission policy:
// its container is created with none of it (no memory limit, cpuset, resctrl group, plan or
// record), it holds nothing on the node, and the node says why. The same pod labelled is placed.
func TestAPlacementOnAnUnlabelledPodIsNotApplied(t *testing.T) {
	for name, labels := range unlabelled {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, true)
			ctx := context.Background()
			forged := pod("forged", "6f1c2a9e-0f01", placed("node-a", "0xf0", 4, 4*gib, 2*gib))
			forged.Labels = labels
			adj, upd, err := f.plugin.CreateContainer(ctx, forged, container("c", "2-3"))
			if adj != nil || upd != nil || err != nil {
				t.Fatalf("an unlabelled pod's placement was applied: %v %v %v", adj, upd, err)
			}
			if f.rec.outcomes[OutcomeForeign] != 1 || f.rec.reasons() != "TmcPlacementIgnored" ||
				!strings.Contains(f.rec.events[0].message, "container c created without tmc's configuration: the pod is not labelled tmc.dev/tiered=true") {
				t.Fatalf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
			}
			if _, err := os.Stat(filepath.Join(f.resctrl, GroupPrefix+"6f1c2a9e-0f01")); !os.IsNotExist(err) {
				t.Error("the unlabelled pod got a resctrl group")
			}
			if _, err := os.Stat(filepath.Join(f.plans, "6f1c2a9e-0f01.plan")); !os.IsNotExist(err) {
				t.Error("the unlabelled pod got a plan")
			}
			if _, ok := f.plugin.readRecord("6f1c2a9e-0f01", "c"); ok {
				t.Error("the unlabelled pod has a record")
			}
			if _, held := f.plugin.pods["6f1c2a9e-0f01"]; held {
				t.Error("the unlabelled pod holds its ways")
			}
			// The same placement on a labelled pod is applied: the ways were free.
			mine := pod("mine", "6f1c2a9e-0f02", placed("node-a", "0xf0", 4, 4*gib, 2*gib))
			adj, _, err = f.plugin.CreateContainer(ctx, mine, container("c", "2-3"))
			if err != nil || adj == nil {
				t.Fatalf("the labelled pod: %v %v", adj, err)
			}
			if lim := adj.GetLinux().GetResources().GetMemory().GetLimit().GetValue(); lim != 6*gib {
				t.Errorf("the labelled pod's memory limit %d", lim)
			}
			if mems := adj.GetLinux().GetResources().GetCpu().GetMems(); mems != "1,3" {
				t.Errorf("the labelled pod's cpuset.mems %q", mems)
			}
			if adj.GetLinux().GetRdt().GetClosId().GetValue() != GroupPrefix+"6f1c2a9e-0f02" {
				t.Errorf("the labelled pod's resctrl group %v", adj.GetLinux().GetRdt())
			}
			if _, err := os.Stat(filepath.Join(f.plans, "6f1c2a9e-0f02.plan")); err != nil {
				t.Errorf("the labelled pod's plan: %v", err)
			}
		})
	}
}

// Without the label nothing waits for the tenant namespaces to be known: the placement is not
// applied whatever the namespace, so the container is created at once.
func TestAnUnlabelledPodIsNotRefusedWhileTheNamespacesAreUnknown(t *testing.T) {
	f := tenantFixture(t, &fixedNamespaces{})
	forged := pod("forged", "6f1c2a9e-0f03", placed("node-a", "0x3", 2, gib, 0))
	forged.Labels = nil
	if adj, _, err := f.plugin.CreateContainer(context.Background(), forged, container("c", "0-1")); adj != nil || err != nil {
		t.Fatalf("an unlabelled pod while the namespaces are unknown: %v %v", adj, err)
	}
	if f.rec.outcomes[OutcomeForeign] != 1 || f.rec.outcomes[OutcomeRefused] != 0 {
		t.Fatalf("outcomes %v", f.rec.outcomes)
	}
}

// Synchronize (after a restart) counts the running labelled pod's placement and not the
// unlabelled one's, and corrects only the labelled pod's container.
func TestSynchronizeCountsOnlyLabelledPods(t *testing.T) {
	f := newFixture(t, true)
	forged := pod("forged", "6f1c2a9e-0f04", placed("node-a", "0xf0", 4, 4*gib, 2*gib))
	forged.Labels = nil
	mine := pod("mine", "6f1c2a9e-0f05", placed("node-a", "0x3", 2, gib, 0))
	cf, cm := container("c", "2-3"), container("c", "0-1")
	cf.Id, cf.PodSandboxId, cf.State = "c-f", forged.Id, api.ContainerState_CONTAINER_RUNNING
	cm.Id, cm.PodSandboxId, cm.State = "c-m", mine.Id, api.ContainerState_CONTAINER_RUNNING
	updates, err := f.plugin.Synchronize(context.Background(), []*api.PodSandbox{forged, mine}, []*api.Container{cf, cm})
	must(t, err)
	if _, held := f.plugin.pods["6f1c2a9e-0f04"]; held {
		t.Error("Synchronize holds the unlabelled pod's ways")
	}
	if _, held := f.plugin.pods["6f1c2a9e-0f05"]; !held {
		t.Error("Synchronize forgot the labelled pod")
	}
	if len(updates) != 1 || updates[0].GetContainerId() != "c-m" {
		t.Fatalf("updates %v: only the labelled pod's container is corrected", updates)
	}
	if f.rec.outcomes[OutcomeLate] != 1 {
		t.Errorf("outcomes %v", f.rec.outcomes)
	}
}

// The reconcile mode applies nothing to a running pod without the label (no memory.max,
// cpuset.mems, resctrl group or plan) and says why; labelled, the same pod is applied.
func TestReconcileAppliesOnlyLabelledPodsPlacements(t *testing.T) {
	uid := "6f1c2a9e-0f06"
	root, podDir := writeCgroups(t, uid, "2-3", "7")
	resctrl, plans := writeResctrl(t), t.TempDir()
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: resctrl}, CgroupRoot: root, PlanDir: plans}
	for name, labels := range unlabelled {
		p := runningPod("forged", uid, "node-a", placed("node-a", "0x3c", 4, 4*gib, 2*gib))
		p.Labels = labels
		done := r.Reconcile([]corev1.Pod{p})
		if len(done) != 1 || len(done[0].Written) != 0 ||
			!strings.Contains(strings.Join(done[0].Unapplied, ";"), "placement: the pod is not labelled tmc.dev/tiered=true") {
			t.Fatalf("%s: %+v", name, done)
		}
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "max" {
		t.Errorf("an unlabelled pod's memory.max was written: %s", got)
	}
	if got := readTrim(t, filepath.Join(podDir, "cpuset.mems")); got != "" {
		t.Errorf("an unlabelled pod's cpuset.mems was written: %s", got)
	}
	if _, err := os.Stat(filepath.Join(resctrl, GroupPrefix+uid)); !os.IsNotExist(err) {
		t.Error("an unlabelled pod got a resctrl group")
	}
	if _, err := os.Stat(filepath.Join(plans, uid+".plan")); !os.IsNotExist(err) {
		t.Error("an unlabelled pod got a plan")
	}
	labelled := runningPod("mine", uid, "node-a", placed("node-a", "0x3c", 4, 4*gib, 2*gib))
	if done := r.Reconcile([]corev1.Pod{labelled}); len(done) != 1 || len(done[0].Written) == 0 {
		t.Fatalf("the labelled pod: %+v", done)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "6442450944" {
		t.Errorf("the labelled pod's memory.max %s", got)
	}
}
