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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// unsynced is a store of recommendations not listed yet.
type unsynced struct{}

func (unsynced) Synced() bool                    { return false }
func (unsynced) Object(string) (Published, bool) { return Published{}, false }

// publishedAt3 is graph500's recommendation at generation 3, priced at 8 GiB (6 DRAM, 2 slow);
// its status keeps generation 1's plan, priced at 4 GiB, all in DRAM.
var publishedAt3 = FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": {Generation: 3, Plans: map[int64]v1alpha1.GenerationPlan{
	3: {DRAMBytes: 6 * gib, SlowBytes: 2 * gib,
		Plan: []v1alpha1.StructurePlan{{Tag: "edges", FastBytes: 4 * gib, SlowBytes: 2 * gib}, {Tag: "visited", FastBytes: 1 * gib}}},
	1: {DRAMBytes: 4 * gib, Plan: []v1alpha1.StructurePlan{{Tag: "edges", FastBytes: 2 * gib}}},
}}}

// placedFrom is a v3 placement of 3 GiB DRAM and 1 GiB slow naming generation gen.
func placedFrom(gen int64) map[string]string { return placedFromObject(gen, "") }

// placedFromObject is placedFrom naming the object's uid too ("": none, as placements written
// before the uid was named).
func placedFromObject(gen int64, uid string) map[string]string {
	from := map[string]any{"recommendation": "graph500-cheapest-1a2b3c4d5e6f", "generation": gen}
	if uid != "" {
		from["uid"] = uid
	}
	body := map[string]any{
		"schema": "tmc.placement/v3", "node": "node-a", "workload": "graph500", "objective": "cheapest",
		"configuration": map[string]any{"vcpus": 2, "dram_bytes": 3 * gib, "slow_bytes": 1 * gib, "slow_ratio": 0.25, "llc_ways": 4},
		"llc_mask":      "0x3c", "slow_from_pool": false, "recommendation_id": "r1", "fallback": nil, "plan": []any{},
		"plan_from": from,
	}
	raw, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return map[string]string{PlacementAnnotation: string(raw), LLCMaskAnnotation: "0x3c"}
}

func TestAPublishedPlanIsSizedAsTheSchedulerSizesIt(t *testing.T) {
	pl, err := ParsePlacement(placedFrom(3))
	must(t, err)
	got, why := ResolvePlan(pl, publishedAt3, false)
	if why != "" || got == nil {
		t.Fatalf("not resolved: %q", why)
	}
	src := publishedAt3["graph500-cheapest-1a2b3c4d5e6f"].Plans[3]
	// The engine's SizeToPod sizes with the same function; the numbers are what it gives.
	want := v1alpha1.SizePlan(src.Plan, src.DRAMBytes, src.SlowBytes, 3*gib, 1*gib)
	if !slices.Equal(got.Plan, want) || got.Plan[0].FastBytes != 2*gib || got.Plan[0].SlowBytes != 1*gib || got.Plan[1].FastBytes != gib/2 {
		t.Fatalf("plan %+v, want %+v", got.Plan, want)
	}
	if got.PlanFrom != nil || pl.PlanFrom == nil || len(pl.Plan) != 0 {
		t.Fatalf("the parsed placement was changed, or the resolved one still names its source")
	}
}

func TestAPlanNotPublishedAsPlacedIsNotApplied(t *testing.T) {
	pl, err := ParsePlacement(placedFrom(2))
	must(t, err)
	for name, plans := range map[string]PublishedPlans{
		"republished": publishedAt3,
		"no API":      nil,
	} {
		got, why := ResolvePlan(pl, plans, false)
		if got == nil || why == "" || len(got.Plan) != 0 || got.Configuration != pl.Configuration {
			t.Errorf("%s: %+v, %q", name, got, why)
		}
	}
	// What the node has not seen yet is waited for, up to PlanWait; then it is not applied.
	for name, plans := range map[string]PublishedPlans{
		"not listed":          unsynced{},
		"object not seen":     FixedPlans{},
		"generation not seen": FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": {Generation: 1, Plans: map[int64]v1alpha1.GenerationPlan{1: {DRAMBytes: gib}}}},
	} {
		if got, why := ResolvePlan(pl, plans, false); got != nil || why == "" {
			t.Errorf("%s: %+v, %q", name, got, why)
		}
		got, why := ResolvePlan(pl, plans, true)
		if got == nil || !strings.Contains(why, "of waiting") || len(got.Plan) != 0 {
			t.Errorf("%s, waited out: %+v, %q", name, got, why)
		}
	}
	// A published plan over its own tiers (the API server's schema does not check sums) is not
	// applied either: sized, each structure takes all of the pod's DRAM.
	over := FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": {Generation: 2, Plans: map[int64]v1alpha1.GenerationPlan{2: {DRAMBytes: 1, SlowBytes: 1,
		Plan: []v1alpha1.StructurePlan{{Tag: "edges", FastBytes: 1}, {Tag: "visited", FastBytes: 1}}}}}}
	if got, why := ResolvePlan(pl, over, false); got == nil || !strings.Contains(why, "does not fit") {
		t.Errorf("over the tiers: %+v, %q", got, why)
	}
}

func TestAContainerGetsThePlanItsPlacementNames(t *testing.T) {
	f := newFixture(t, true)
	f.plugin.cfg.Plans = publishedAt3
	adj, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "6f1c2a9e-0003", placedFrom(3)), container("bfs", "2-3"))
	must(t, err)
	text, err := os.ReadFile(filepath.Join(f.plans, "6f1c2a9e-0003.plan"))
	must(t, err)
	if !strings.Contains(string(text), "tag edges 2147483648 1073741824\n") || !strings.Contains(string(text), "tag visited 536870912 0\n") ||
		!strings.Contains(string(text), "default_fast_bytes 536870912\n") {
		t.Errorf("plan file:\n%s", text)
	}
	if envOf(adj)["TMC_PLAN"] != ContainerPlanPath || f.rec.outcomes[OutcomeAdjusted] != 1 || len(f.rec.events) != 0 {
		t.Errorf("env %v, outcomes %v, events %v", envOf(adj), f.rec.outcomes, f.rec.events)
	}
}

func TestARepublishedPlanIsReportedAndTheRestApplied(t *testing.T) {
	f := newFixture(t, true)
	f.plugin.cfg.Plans = publishedAt3
	adj, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "6f1c2a9e-0004", placedFrom(2)), container("bfs", "2-3"))
	must(t, err)
	// Within what the pod was given: its memory and ways, and a plan with no structure named
	// (every structure in DRAM up to the pod's DRAM, the rest slow).
	if lim := adj.GetLinux().GetResources().GetMemory().GetLimit().GetValue(); lim != 4*gib {
		t.Errorf("memory limit %d", lim)
	}
	text, err := os.ReadFile(filepath.Join(f.plans, "6f1c2a9e-0004.plan"))
	must(t, err)
	if strings.Contains(string(text), "tag ") || !strings.Contains(string(text), "default_fast_bytes 3221225472\n") {
		t.Errorf("plan file:\n%s", text)
	}
	if f.rec.outcomes[OutcomePartial] != 1 || f.rec.unapplied["plan"] != 1 || f.rec.reasons() != "TmcNotApplied" ||
		!strings.Contains(f.rec.events[0].message, "no longer keeps the plan of generation 2") {
		t.Errorf("outcomes %v, unapplied %v, events %v", f.rec.outcomes, f.rec.unapplied, f.rec.events)
	}
}

func TestPlacedContainersWaitUntilThePlansAreListed(t *testing.T) {
	f := newFixture(t, true)
	f.plugin.cfg.Plans = unsynced{}
	_, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "6f1c2a9e-0005", placedFrom(3)), container("bfs", "2-3"))
	if err == nil || !strings.Contains(err.Error(), "not listed tmc's published recommendations") {
		t.Fatalf("created before the plans were listed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.plans, "6f1c2a9e-0005.plan")); !os.IsNotExist(err) {
		t.Errorf("a plan was written on a guess: %v", err)
	}
	// Nothing is held for the refused container: the next attempt, once listed, is admitted.
	f.plugin.cfg.Plans = publishedAt3
	if _, _, err := f.plugin.CreateContainer(context.Background(), pod("bfs", "6f1c2a9e-0005", placedFrom(3)), container("bfs", "2-3")); err != nil {
		t.Fatalf("after listing: %v", err)
	}
}

// A pod placed from a generation the spec has since moved past gets that generation's plan, as
// the object's status keeps it (the publisher writes the latest few there).
func TestAnEarlierGenerationsPlanIsReadFromTheStatus(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "tmc.dev/v1alpha1", "kind": "TieredRecommendation",
		"metadata": map[string]any{"name": "graph500-cheapest-1a2b3c4d5e6f", "generation": int64(3)},
		"spec": map[string]any{"workload": "graph500", "objective": "cheapest", "dram_bytes": 6 * gib, "slow_bytes": 2 * gib, "llc_ways": 4, "slow_ratio": 0.25,
			"plan": []any{map[string]any{"tag": "edges", "fast_bytes": 4 * gib, "slow_bytes": 2 * gib}, map[string]any{"tag": "visited", "fast_bytes": gib, "slow_bytes": 0}}},
		"status": map[string]any{"plans": []any{
			// What the status says of the current generation is not read: the spec is.
			map[string]any{"generation": 3, "dram_bytes": 1, "slow_bytes": 0, "plan": []any{}},
			map[string]any{"generation": 1, "dram_bytes": 4 * gib, "slow_bytes": 0, "plan": []any{map[string]any{"tag": "edges", "fast_bytes": 2 * gib, "slow_bytes": 0}}},
		}},
	}
	read := publishedOf(&unstructured.Unstructured{Object: obj})
	if read.Generation != 3 || len(read.Plans) != 2 || read.Plans[3].DRAMBytes != 6*gib || len(read.Plans[3].Plan) != 2 {
		t.Fatalf("read %+v", read)
	}
	plans := FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": read}
	pl, err := ParsePlacement(placedFrom(1))
	must(t, err)
	got, why := ResolvePlan(pl, plans, false)
	if why != "" || len(got.Plan) != 1 || got.Plan[0].FastBytes != 3*gib/2 || got.Plan[0].SlowBytes != 0 {
		t.Fatalf("generation 1 at 3 GiB DRAM: %+v, %q", got, why)
	}
	pl, err = ParsePlacement(placedFrom(3))
	must(t, err)
	if got, why := ResolvePlan(pl, plans, false); why != "" || len(got.Plan) != 2 || got.Plan[0].FastBytes != 2*gib {
		t.Fatalf("generation 3: %+v, %q", got, why)
	}
}

// The reconcile mode reads a v3 placement's plan where it is published, and a plan file it
// wrote from the generation the pod names stands once the object has moved past keeping it.
func TestReconcileWritesThePublishedPlanAndKeepsIt(t *testing.T) {
	uid := "6f1c2a9e-0006"
	root, _ := writeCgroups(t, uid, "2-3", "101")
	plans := t.TempDir()
	r := &Reconciler{NodeName: "node-a", SysRoot: twoSockets(t), Resctrl: &Resctrl{Root: writeResctrl(t)}, CgroupRoot: root, PlanDir: plans, Plans: unsynced{}}
	pods := []corev1.Pod{runningPod("bfs", uid, "node-a", placedFrom(3))}
	path := filepath.Join(plans, uid+".plan")

	done := r.Reconcile(pods)
	if _, err := os.Stat(path); !os.IsNotExist(err) || !strings.Contains(strings.Join(done[0].Unapplied, ";"), PlanNotYet) {
		t.Fatalf("applied before the plans were listed: %+v", done)
	}
	r.Plans = publishedAt3
	r.Reconcile(pods)
	written := readTrim(t, path)
	if !strings.Contains(written, "tag edges 2147483648 1073741824") {
		t.Fatalf("plan file:\n%s", written)
	}
	r.Plans = FixedPlans{"graph500-cheapest-1a2b3c4d5e6f": {Generation: 9, Plans: map[int64]v1alpha1.GenerationPlan{9: {DRAMBytes: gib}}}}
	done = r.Reconcile(pods)
	if readTrim(t, path) != written || strings.Contains(strings.Join(done[0].Unapplied, ";"), "plan:") {
		t.Fatalf("the plan the pod started with was changed or reported: %+v", done)
	}
	// The plan resolved is kept with the pod: its plan file, lost, is written again from it,
	// not from what the object says now.
	must(t, os.Remove(path))
	done = r.Reconcile(pods)
	if readTrim(t, path) != written || strings.Contains(strings.Join(done[0].Unapplied, ";"), "plan:") {
		t.Fatalf("the plan was resolved again: %+v", done)
	}
	// A pod whose plan was never resolved gets none, and is told why.
	other := runningPod("bfs2", "6f1c2a9e-0007", "node-a", placedFrom(3))
	root2, _ := writeCgroups(t, "6f1c2a9e-0007", "2-3", "102")
	r.CgroupRoot = root2
	done = r.Reconcile([]corev1.Pod{other})
	if !strings.Contains(strings.Join(done[0].Unapplied, ";"), "no longer keeps the plan of generation 3") {
		t.Fatalf("%+v", done)
	}
	// What was kept goes with the pods.
	if _, err := r.RemoveStale(nil); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(plans, "*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
