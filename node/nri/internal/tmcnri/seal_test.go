package tmcnri

import (
	"context"
	"strings"
	"testing"

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
			if _, _, err := f.plugin.CreateContainer(ctx, pod("run", "u2", verify), container("c", "")); err == nil {
				t.Error("a verification run with an unsealed placement started")
			}
		})
	}

	off := newFixture(t, true)
	if adj, _, err := off.plugin.CreateContainer(ctx, pod("plain", "u3", placed("node-a", "0xf", 4, gib, 0)), container("c", "")); err != nil || adj == nil {
		t.Errorf("seals off: an unsealed placement is not applied (adj %v, err %v)", adj, err)
	}
}
