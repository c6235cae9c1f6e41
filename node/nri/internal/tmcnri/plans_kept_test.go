package tmcnri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// movedOn is graph500's recommendation published four times since generation 3: its status
// keeps generation 3's plan no more.
var movedOn = FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": {Generation: 7, Plans: map[int64]v1alpha1.GenerationPlan{
	7: {DRAMBytes: gib, Plan: []v1alpha1.StructurePlan{{Tag: "edges", FastBytes: gib}}},
}}}

// A container created long after its pod was placed (restarted, or after a long init
// container) gets the plan the pod's first container got, not what the object says by then;
// so does one created after tmc-nri restarted. The kept plan goes with the pod.
func TestALaterContainerGetsThePlanThePodsFirstGot(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true)
	f.plugin.cfg.Plans = publishedAt3
	p := pod("bfs", "6f1c2a9e-0010", placedFrom(3))
	planPath := filepath.Join(f.plans, "6f1c2a9e-0010.plan")
	_, _, err := f.plugin.CreateContainer(ctx, p, container("init", "2-3"))
	must(t, err)
	first := readTrim(t, planPath)
	if !strings.Contains(first, "tag edges 2147483648 1073741824") {
		t.Fatalf("plan file:\n%s", first)
	}

	f.plugin.cfg.Plans = movedOn
	adj, _, err := f.plugin.CreateContainer(ctx, p, container("bfs", "2-3"))
	must(t, err)
	if readTrim(t, planPath) != first || envOf(adj)["TMC_PLAN"] != ContainerPlanPath {
		t.Fatalf("the later container's plan:\n%s", readTrim(t, planPath))
	}
	if f.rec.outcomes[OutcomeAdjusted] != 2 || f.rec.unapplied["plan"] != 0 || len(f.rec.events) != 0 {
		t.Fatalf("outcomes %v, unapplied %v, events %v", f.rec.outcomes, f.rec.unapplied, f.rec.events)
	}

	// tmc-nri restarts: nothing of the pod is in memory, the runtime synchronises, and the
	// container restarts.
	restarted := New(f.plugin.cfg, f.rec, f.rec)
	if _, err := restarted.Synchronize(ctx, []*api.PodSandbox{p}, nil); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(planPath))
	adj, _, err = restarted.CreateContainer(ctx, p, container("bfs", "2-3"))
	must(t, err)
	if readTrim(t, planPath) != first || envOf(adj)["TMC_PLAN"] != ContainerPlanPath || len(f.rec.events) != 0 {
		t.Fatalf("after a restart: %v\n%s", f.rec.events, readTrim(t, planPath))
	}

	must(t, restarted.RemovePodSandbox(ctx, p))
	if left, _ := filepath.Glob(filepath.Join(f.plans, "6f1c2a9e-0010*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// A plan the pod's first container could not get is not got by its later ones either: the pod
// runs one way, reported once per container as not applied.
func TestAPlanNotAppliedStaysNotApplied(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true)
	f.plugin.cfg.Plans = movedOn
	p := pod("bfs", "6f1c2a9e-0012", placedFrom(3))
	_, _, err := f.plugin.CreateContainer(ctx, p, container("init", "2-3"))
	must(t, err)
	first := readTrim(t, filepath.Join(f.plans, "6f1c2a9e-0012.plan"))
	// Whatever the node sees later (generation 3 again, here), the kept answer stands.
	f.plugin.cfg.Plans = publishedAt3
	_, _, err = f.plugin.CreateContainer(ctx, p, container("bfs", "2-3"))
	must(t, err)
	if readTrim(t, filepath.Join(f.plans, "6f1c2a9e-0012.plan")) != first || f.rec.unapplied["plan"] != 2 {
		t.Fatalf("unapplied %v, plan:\n%s", f.rec.unapplied, readTrim(t, filepath.Join(f.plans, "6f1c2a9e-0012.plan")))
	}
}

// The node's watch may lag the scheduler's: a pod placed from an object, or a generation, the
// node has not seen yet waits for it (the kubelet creates the container again), and gets the
// plan once the node sees it; it never gets a plan with no structure named for the lag alone.
func TestAContainerWaitsForWhatItWasPlacedFrom(t *testing.T) {
	ctx := context.Background()
	for i, behind := range []FixedPlans{
		{}, // the object not seen yet
		{"graph500-cheapest-1a2b3c4d5e6f": {Generation: 2, Plans: map[int64]v1alpha1.GenerationPlan{2: {DRAMBytes: gib}}}},
	} {
		f := newFixture(t, true)
		f.plugin.cfg.Plans = behind
		uid := "6f1c2a9e-002" + string(rune('0'+i))
		p := pod("bfs", uid, placedFrom(3))
		_, _, err := f.plugin.CreateContainer(ctx, p, container("bfs", "2-3"))
		var refused *RefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("case %d: created before the node saw generation 3: %v", i, err)
		}
		if left, _ := filepath.Glob(filepath.Join(f.plans, uid+"*")); len(left) != 0 {
			t.Fatalf("case %d: written on a guess: %v", i, left)
		}
		f.plugin.cfg.Plans = publishedAt3
		_, _, err = f.plugin.CreateContainer(ctx, p, container("bfs", "2-3"))
		must(t, err)
		if plan := readTrim(t, filepath.Join(f.plans, uid+".plan")); !strings.Contains(plan, "tag edges 2147483648 1073741824") {
			t.Fatalf("case %d: plan file:\n%s", i, plan)
		}
	}
}

// The wait is bounded: a pod still waiting PlanWait after its first container was refused runs
// without the per-structure plan, reported as not applied.
func TestTheWaitForAPublishedPlanIsBounded(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true)
	f.plugin.cfg.Plans = FixedPlans{}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.plugin.now = func() time.Time { return clock }
	p := pod("bfs", "6f1c2a9e-0030", placedFrom(3))
	for _, after := range []time.Duration{0, PlanWait - time.Second} {
		clock = clock.Add(after)
		if _, _, err := f.plugin.CreateContainer(ctx, p, container("bfs", "2-3")); err == nil {
			t.Fatalf("created %s after the first refusal", after)
		}
	}
	clock = clock.Add(time.Second)
	adj, _, err := f.plugin.CreateContainer(ctx, p, container("bfs", "2-3"))
	must(t, err)
	last := f.rec.events[len(f.rec.events)-1]
	if envOf(adj)["TMC_PLAN"] != ContainerPlanPath || f.rec.unapplied["plan"] != 1 || last.reason != "TmcNotApplied" ||
		!strings.Contains(last.message, "does not see TieredRecommendation graph500-cheapest-1a2b3c4d5e6f") {
		t.Fatalf("env %v, unapplied %v, events %v", envOf(adj), f.rec.unapplied, f.rec.events)
	}
}

// The reconcile mode waits the same way, counted from the pod's start.
func TestReconcileWaitsForWhatThePodWasPlacedFrom(t *testing.T) {
	uid := "6f1c2a9e-0031"
	root, _ := writeCgroups(t, uid, "2-3", "101")
	plans := t.TempDir()
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := started.Add(time.Second)
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: writeResctrl(t)}, CgroupRoot: root, PlanDir: plans,
		Plans: FixedPlans{}, now: func() time.Time { return clock }}
	pod := runningPod("bfs", uid, "node-a", placedFrom(3))
	pod.Status.StartTime = &metav1.Time{Time: started}
	done := r.Reconcile([]corev1.Pod{pod})
	if left, _ := filepath.Glob(filepath.Join(plans, "*")); len(left) != 0 || !strings.Contains(strings.Join(done[0].Unapplied, ";"), "does not see") {
		t.Fatalf("applied on a guess: %v, %+v", left, done)
	}
	clock = started.Add(PlanWait)
	done = r.Reconcile([]corev1.Pod{pod})
	if _, err := os.Stat(filepath.Join(plans, uid+".plan")); err != nil || !strings.Contains(strings.Join(done[0].Unapplied, ";"), "plan: the node does not see") {
		t.Fatalf("still waiting: %v, %+v", err, done)
	}
}

// An object deleted and made again under the same name counts its generations from 1 again: a
// placement that names the object's uid gets no plan of another object, whatever its
// generation; one written before placements named the uid is matched by name and generation.
func TestAPlanOfAnObjectMadeAgainIsNotApplied(t *testing.T) {
	made := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tmc.dev/v1alpha1", "kind": "TieredRecommendation",
		"metadata": map[string]any{"name": "graph500-cheapest-1a2b3c4d5e6f", "generation": int64(3), "uid": "0b7a8c1e-0000-0000-0000-00000000000b"},
		"spec": map[string]any{"workload": "graph500", "objective": "cheapest", "dram_bytes": 4 * gib, "slow_bytes": 0, "llc_ways": 4, "slow_ratio": 0.0,
			"plan": []any{map[string]any{"tag": "edges", "fast_bytes": 2 * gib, "slow_bytes": 0}}},
	}}
	plans := FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": publishedOf(made)}
	for uid, want := range map[string]string{
		"0b7a8c1e-0000-0000-0000-00000000000a": "another object",
		"0b7a8c1e-0000-0000-0000-00000000000b": "",
		"":                                     "",
	} {
		pl, err := ParsePlacement(placedFromObject(3, uid))
		must(t, err)
		got, why := ResolvePlan(pl, plans, false)
		if got == nil || (want == "") != (why == "") || !strings.Contains(why, want) || (want == "") != (len(got.Plan) == 1) {
			t.Errorf("placed from uid %q: %+v, %q", uid, got, why)
		}
	}
	// Through the plugin: reported, and the rest applied.
	f := newFixture(t, true)
	f.plugin.cfg.Plans = plans
	_, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "6f1c2a9e-0040", placedFromObject(3, "0b7a8c1e-0000-0000-0000-00000000000a")), container("bfs", "2-3"))
	must(t, err)
	if f.rec.unapplied["plan"] != 1 || !strings.Contains(f.rec.events[0].message, "another object") {
		t.Fatalf("unapplied %v, events %v", f.rec.unapplied, f.rec.events)
	}
}
