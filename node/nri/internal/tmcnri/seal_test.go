package tmcnri

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// With the seal's keys, the node applies only a placement tmc's scheduler sealed for this pod:
// one carried by anyone else's Binding (no seal, another pod's seal, a placement changed after
// sealing) creates the container without tmc's configuration, reported and counted, and holds
// nothing against the node's placements; a verification run with one does not start.
func TestOnlySealedPlacementsAreApplied(t *testing.T) {
	keys, err := v1alpha1.NewSealKeys(map[string][]byte{"k1": []byte(strings.Repeat("node key ", 5))}, "k1")
	must(t, err)
	sealedFor := func(uid string, ann map[string]string) map[string]string {
		seal, err := keys.Seal(uid, ann)
		must(t, err)
		ann[v1alpha1.PlacementSealAnnotation] = seal
		return ann
	}
	newSealed := func() *fixture {
		f := newFixture(t, true)
		f.plugin.cfg.Seals = keys
		return f
	}
	ctx := context.Background()

	f := newSealed()
	adj, _, err := f.plugin.CreateContainer(ctx, pod("mine", "u1", sealedFor("u1", placed("node-a", "0xf", 4, gib, 0))), container("c", ""))
	if err != nil || adj == nil || f.rec.outcomes[OutcomeAdjusted] != 1 {
		t.Fatalf("a sealed placement: adj %v err %v outcomes %v", adj, err, f.rec.outcomes)
	}

	changed := sealedFor("u2", placed("node-a", "0xf", 4, gib, 0))
	changed[PlacementAnnotation] = placementJSON("node-a", "0xf", 4, 2*gib, 0)
	for name, ann := range map[string]map[string]string{
		"no seal":               placed("node-a", "0xf", 4, gib, 0),
		"another pod's seal":    sealedFor("someone-else", placed("node-a", "0xf", 4, gib, 0)),
		"changed after sealing": changed,
	} {
		t.Run(name, func(t *testing.T) {
			f := newSealed()
			adj, upd, err := f.plugin.CreateContainer(ctx, pod("forged", "u2", ann), container("c", ""))
			if adj != nil || upd != nil || err != nil {
				t.Fatalf("adj %v upd %v err %v", adj, upd, err)
			}
			if f.rec.outcomes[OutcomeUnsealed] != 1 || f.rec.reasons() != "TmcPlacementUnsealed" {
				t.Errorf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
			}
			if pl, _, _ := f.plugin.heldBy(pod("forged", "u2", ann), container("c", "")); pl != nil {
				t.Error("an unsealed placement holds room on the node")
			}
			verify := map[string]string{VerificationRunAnnotation: "true"}
			for k, v := range ann {
				verify[k] = v
			}
			if _, _, err := f.plugin.CreateContainer(ctx, pod("run", "u2", verify), container("c", "")); err == nil ||
				!strings.Contains(err.Error(), "not tmc's") || !strings.Contains(err.Error(), v1alpha1.PlacementSealAnnotation) {
				t.Errorf("a verification run with an unsealed placement: %v", err)
			}
		})
	}

	// A seal naming a key the node does not hold yet (one rotated in, before the kubelet brings
	// it to this node's volume): refused, so that the kubelet creates the container again.
	f = newSealed()
	rotated := placed("node-a", "0xf", 4, gib, 0)
	rotated[v1alpha1.PlacementSealAnnotation] = "v1:k2:" + strings.Repeat("A", 43)
	if _, _, err := f.plugin.CreateContainer(ctx, pod("rotated", "u4", rotated), container("c", "")); err == nil ||
		!strings.Contains(err.Error(), "does not hold") || f.rec.outcomes[OutcomeUnsealed] != 0 {
		t.Errorf("a key not held yet: %v (outcomes %v)", err, f.rec.outcomes)
	}

	off := newFixture(t, true)
	if adj, _, err := off.plugin.CreateContainer(ctx, pod("plain", "u3", placed("node-a", "0xf", 4, gib, 0)), container("c", "")); err != nil || adj == nil {
		t.Errorf("seals off: an unsealed placement is not applied (adj %v, err %v)", adj, err)
	}
}

// tmc-nri reconcile holds running pods to the same seal: an unsealed placement writes nothing
// and is reported unapplied; the same placement sealed for the pod is applied.
func TestReconcileAppliesOnlySealedPlacements(t *testing.T) {
	keys, err := v1alpha1.NewSealKeys(map[string][]byte{"k1": []byte(strings.Repeat("node key ", 5))}, "")
	must(t, err)
	signer, err := v1alpha1.NewSealKeys(map[string][]byte{"k1": []byte(strings.Repeat("node key ", 5))}, "k1")
	must(t, err)
	uid := "6f1c2a9e-0060"
	root, podDir := writeCgroups(t, uid, "0-1", "9")
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: writeResctrl(t)},
		CgroupRoot: root, PlanDir: t.TempDir(), Seals: keys}
	ann := placed("node-a", "0x3", 2, gib, 0)
	done := r.Reconcile([]corev1.Pod{runningPod("forged", uid, "node-a", ann)})
	if len(done) != 1 || len(done[0].Written) != 0 || len(done[0].Unapplied) != 1 ||
		!strings.Contains(done[0].Unapplied[0], v1alpha1.PlacementSealAnnotation) {
		t.Fatalf("unsealed: %+v", done)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != "max" {
		t.Errorf("an unsealed placement wrote memory.max %s", got)
	}
	seal, err := signer.Seal(uid, ann)
	must(t, err)
	ann[v1alpha1.PlacementSealAnnotation] = seal
	done = r.Reconcile([]corev1.Pod{runningPod("sealed", uid, "node-a", ann)})
	if len(done) != 1 || len(done[0].Written) == 0 {
		t.Fatalf("sealed: %+v", done)
	}
	if got := readTrim(t, filepath.Join(podDir, "memory.max")); got != fmt.Sprint(gib) {
		t.Errorf("a sealed placement: memory.max %s, want %d", got, gib)
	}
}
