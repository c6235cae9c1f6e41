package tmc

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

func container(requests, limits map[v1.ResourceName]string) v1.Container {
	c := v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
	for k, v := range requests {
		c.Resources.Requests[k] = resource.MustParse(v)
	}
	for k, v := range limits {
		c.Resources.Limits[k] = resource.MustParse(v)
	}
	return c
}

// tieredLabels are the labels of a pod tmc places (v1alpha1.IsTieredPod).
func tieredLabels() map[string]string {
	return map[string]string{v1alpha1.TieredPodLabel: v1alpha1.TieredPodLabelValue}
}

// tieredPod is a pod that opts in and carries the tiered pod label.
func tieredPod(name string, ann map[string]string, cpu, memory string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name), Annotations: ann, Labels: tieredLabels(),
		},
		Spec: v1.PodSpec{Containers: []v1.Container{container(
			map[v1.ResourceName]string{v1.ResourceCPU: cpu, v1.ResourceMemory: memory, OptInResource: "1"},
			map[v1.ResourceName]string{OptInResource: "1"},
		)}},
	}
}

func TestReadPodWithoutOptIn(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{container(map[v1.ResourceName]string{v1.ResourceCPU: "1"}, nil)}}}
	ask, err := ReadPod(pod)
	if err != nil || ask.OptedIn {
		t.Fatalf("a pod without %s: %+v, %v", OptInResource, ask, err)
	}
}

func TestReadPodFallback(t *testing.T) {
	// 1.5 CPUs round up to 2 vCPUs; the memory request (4480Mi) is all in DRAM; no ways named:
	// the longest free run at Reserve, at least one way to fit.
	ask, err := ReadPod(tieredPod("bfs", map[string]string{WorkloadAnnotation: "graph500"}, "1500m", "4480Mi"))
	if err != nil {
		t.Fatal(err)
	}
	if !ask.OptedIn || ask.VCPUs != 2 || ask.MemoryBytes != 4480<<20 || ask.DRAMBytes != 4480<<20 || ask.SlowBytes != 0 || ask.LLCWays != 0 || ask.NeedWays() != 1 {
		t.Errorf("fallback ask: %+v", ask)
	}
	if ask.Fallback == nil || !strings.Contains(*ask.Fallback, RecommendationAnnotation) || ask.RecommendationID != nil {
		t.Errorf("fallback reason: %v", ask.Fallback)
	}
	if ask.Objective != "cheapest" || ask.Workload == nil || *ask.Workload != "graph500" {
		t.Errorf("workload %v objective %q", ask.Workload, ask.Objective)
	}
}

func TestReadPodInitContainersAndLimits(t *testing.T) {
	// An init container larger than the containers' sum wins. (A request missing beside a limit is
	// defaulted to the limit by the API server before any scheduler reads the pod.)
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers: []v1.Container{
			container(map[v1.ResourceName]string{v1.ResourceCPU: "1", v1.ResourceMemory: "1Gi", OptInResource: "1"}, map[v1.ResourceName]string{v1.ResourceMemory: "1Gi", OptInResource: "1"}),
			container(map[v1.ResourceName]string{v1.ResourceCPU: "1", v1.ResourceMemory: "1Gi"}, nil),
		},
		InitContainers: []v1.Container{container(map[v1.ResourceName]string{v1.ResourceCPU: "3", v1.ResourceMemory: "1Gi"}, nil)},
	}}
	ask, err := ReadPod(pod)
	if err != nil || !ask.OptedIn || ask.VCPUs != 3 || ask.MemoryBytes != 2<<30 {
		t.Fatalf("%+v, %v", ask, err)
	}
}

func TestReadPodRecommendation(t *testing.T) {
	rec := `{"schema":"tmc.recommendation/v1","workload":"graph500","objective":"slo:5%","recommendation_id":"r-9",` +
		`"dram_bytes":3221225472,"slow_bytes":1073741824,"llc_ways":4,"slow_ratio":0.25,` +
		`"plan":[{"tag":"frontier","fast_bytes":1073741824,"slow_bytes":1073741824}]}`
	ann := map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%", RecommendationAnnotation: rec}
	ask, err := ReadPod(tieredPod("bfs", ann, "4", "4Gi"))
	if err != nil {
		t.Fatal(err)
	}
	if ask.Fallback != nil || ask.DRAMBytes != 3<<30 || ask.SlowBytes != 1<<30 || ask.LLCWays != 4 || ask.SlowRatio != 0.25 ||
		ask.RecommendationID == nil || *ask.RecommendationID != "r-9" || len(ask.Plan) != 1 || ask.VCPUs != 4 {
		t.Fatalf("recommended ask: %+v (fallback %v)", ask, ask.Fallback)
	}

	// What is not trusted falls back, and says why.
	for name, c := range map[string]struct {
		ann map[string]string
		why string
	}{
		"another workload":  {map[string]string{WorkloadAnnotation: "bc", ObjectiveAnnotation: "slo:5%", RecommendationAnnotation: rec}, "another workload"},
		"another objective": {map[string]string{WorkloadAnnotation: "graph500", RecommendationAnnotation: rec}, "another objective"},
		"not JSON":          {map[string]string{RecommendationAnnotation: "{"}, "unreadable"},
		"unknown schema":    {map[string]string{RecommendationAnnotation: `{"schema":"x","dram_bytes":1,"slow_bytes":0,"llc_ways":1,"slow_ratio":0}`}, "unreadable"},
		"no ways":           {map[string]string{RecommendationAnnotation: `{"schema":"tmc.recommendation/v1","dram_bytes":1,"slow_bytes":0,"llc_ways":0,"slow_ratio":0}`}, "llc_ways"},
		"plan above dram":   {map[string]string{RecommendationAnnotation: `{"schema":"tmc.recommendation/v1","dram_bytes":1,"slow_bytes":0,"llc_ways":1,"slow_ratio":0,"plan":[{"tag":"a","fast_bytes":2,"slow_bytes":0}]}`}, "more in a tier"},
	} {
		ask, err := ReadPod(tieredPod("p", c.ann, "1", "1Gi"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if ask.Fallback == nil || !strings.Contains(*ask.Fallback, c.why) || ask.DRAMBytes != 1<<30 || ask.LLCWays != 0 {
			t.Errorf("%s: want the fallback because %q, got %+v (%v)", name, c.why, ask, ask.Fallback)
		}
	}
}

// A pinned recommendation is one JSON value with only whitespace after it, as model.node_contract
// reads it: a stray ']' or '}' or a second value after it makes it unreadable (the pod gets the
// fallback and is told why), never read as the value before them.
func TestAPinnedRecommendationIsOneJSONValue(t *testing.T) {
	rec := `{"schema":"tmc.recommendation/v1","workload":"graph500","objective":"slo:5%","recommendation_id":"r-9",` +
		`"dram_bytes":3221225472,"slow_bytes":1073741824,"llc_ways":4,"slow_ratio":0.25}`
	for name, c := range map[string]struct {
		text string
		read bool
	}{
		"trailing whitespace":  {rec + " \t\r\n", true},
		"trailing ]":           {rec + "]", false},
		"trailing }":           {rec + "}", false},
		"a second value":       {rec + " " + rec, false},
		"an empty object next": {rec + "{}", false},
	} {
		ann := map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%", RecommendationAnnotation: c.text}
		ask, err := ReadPod(tieredPod("p", ann, "1", "4Gi"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if read := ask.Fallback == nil; read != c.read {
			t.Errorf("%s: read %v, want %v (fallback %v)", name, read, c.read, ask.Fallback)
		} else if !read && (ask.FallbackReason != v1alpha1.FallbackUnreadable || !strings.Contains(*ask.Fallback, "after the JSON value")) {
			t.Errorf("%s: fallback %s %q", name, ask.FallbackReason, *ask.Fallback)
		}
	}
}

func TestReadPodTooLarge(t *testing.T) {
	if _, err := ReadPod(tieredPod("huge", nil, "5000", "1Gi")); err == nil {
		t.Error("a pod asking for 5000 CPUs was read")
	}
	if _, err := ReadPod(tieredPod("huge", nil, "1", "4Pi")); err == nil {
		t.Error("a pod asking for 4 PiB was read")
	}
}

// pinned builds a pinned recommendation with n structures of the given bytes each and a tag of
// tagLen characters, and a configuration exactly their sums (saturated at MaxBytes-1).
func pinned(n int, each int64, tagLen int) string {
	plan := make([]StructurePlan, n)
	for i := range plan {
		tag := fmt.Sprintf("s%0*d", tagLen-1, i)
		plan[i] = StructurePlan{Tag: tag, FastBytes: each, SlowBytes: 0}
	}
	body, _ := json.Marshal(map[string]any{
		"schema": RecommendationSchema, "dram_bytes": MaxBytes - 1, "slow_bytes": 0,
		"llc_ways": 2, "slow_ratio": 0, "plan": plan,
	})
	return string(body)
}

func TestReadPodRefusesAPlanWhoseSumsOverflow(t *testing.T) {
	// 2,049 structures of 2^52-1 bytes: the sum passes 2^63 and wraps an int64 negative, under
	// the configuration's DRAM. The Python contract refuses the plan (its sum is exact).
	raw := pinned(2049, MaxBytes-1, 4)
	ask, err := ReadPod(tieredPod("big", map[string]string{RecommendationAnnotation: raw}, "1", "1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	if ask.Fallback == nil || !strings.Contains(*ask.Fallback, "places more in a tier than the configuration holds") {
		t.Fatalf("a plan whose sums overflow was not refused for them: %+v", ask)
	}
	if ask.DRAMBytes != 1<<30 || len(ask.Plan) != 0 {
		t.Errorf("not the fallback: %+v", ask)
	}
}

func TestReadPodRefusesAPlacementPastTheAnnotationBound(t *testing.T) {
	// 4,096 tags of 40 characters: a placement of ~300 KB, past the API server's 256 KiB for
	// all of the pod's annotations; the pod gets the fallback and is never bound with it.
	raw := pinned(4096, 1, 40)
	ask, err := ReadPod(tieredPod("wide", map[string]string{RecommendationAnnotation: raw}, "1", "1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	if ask.Fallback == nil || !strings.Contains(*ask.Fallback, "over tmc's bound of 65536") {
		t.Fatalf("an oversized placement was taken: fallback %v", ask.Fallback)
	}
	// A plan that fits is taken.
	ok, err := ReadPod(tieredPod("narrow", map[string]string{RecommendationAnnotation: pinned(64, 1, 40)}, "1", "1Gi"))
	if err != nil || ok.Fallback != nil || len(ok.Plan) != 64 {
		t.Fatalf("a plan that fits: %+v, %v", ok, err)
	}
	// Its annotations are what the Binding writes, and they fit the bound.
	p := Placement{Schema: PlacementSchema, Node: strings.Repeat("n", 253), Objective: ok.Objective,
		Configuration: PlacedConfiguration{VCPUs: ok.VCPUs, DRAMBytes: ok.DRAMBytes, LLCWays: ok.LLCWays},
		LLCMask:       FormatMask(RunMask(0, ok.LLCWays)), Plan: ok.Plan}
	ann, err := PlacementAnnotations(&p)
	if err != nil || annotationsSize(ann) > MaxPlacementAnnotationsBytes {
		t.Fatalf("%d bytes, %v", annotationsSize(ann), err)
	}
}

func TestReadPodLeavesRoomForThePodsOwnAnnotations(t *testing.T) {
	ann := map[string]string{RecommendationAnnotation: pinned(2, 1, 4), "example.com/blob": strings.Repeat("x", 150*1024)}
	ask, err := ReadPod(tieredPod("crowded", ann, "1", "1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	if ask.Fallback == nil || !strings.Contains(*ask.Fallback, "the pod's own annotations take") {
		t.Fatalf("fallback %v", ask.Fallback)
	}
}

// A published text read once is answered from the memo for every pod with the same workload,
// objective and vCPUs, and the answer is the one reading it afresh gives, for every field the
// reading depends on: another workload, objective, vCPU count or memory request is read anew.
func TestReadingAPublishedRecommendationIsRemembered(t *testing.T) {
	index := NewRecommendationIndex()
	spec := map[string]any{
		"schema": RecommendationSchema, "workload": "graph500", "objective": "cheapest", "recommendation_id": "r-9",
		"dram_bytes": 2 << 30, "slow_bytes": 1 << 30, "llc_ways": 4, "slow_ratio": 0.3,
		"plan": []any{map[string]any{"tag": "edges", "fast_bytes": 1 << 29, "slow_bytes": 1 << 28}},
	}
	index.Set("graph500-cheapest", spec)
	fallback := map[string]any{"schema": RecommendationSchema, "workload": "graph500", "objective": "slo:5%", "fallback": "no profile"}
	index.Set("graph500-slo-5", fallback)
	raw, _ := index.Lookup("graph500", "cheapest")
	pods := []*v1.Pod{
		tieredPod("a", map[string]string{WorkloadAnnotation: "graph500"}, "1", "3Gi"),
		tieredPod("b", map[string]string{WorkloadAnnotation: "graph500"}, "1", "3Gi"),
		tieredPod("c", map[string]string{WorkloadAnnotation: "graph500"}, "3", "3Gi"),
		tieredPod("d", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%"}, "1", "3Gi"),
		tieredPod("e", map[string]string{WorkloadAnnotation: "xsbench"}, "1", "3Gi"),
		tieredPod("f", map[string]string{WorkloadAnnotation: "graph500", RecommendationAnnotation: string(raw)}, "1", "3Gi"),
		tieredPod("g", map[string]string{WorkloadAnnotation: "other", RecommendationAnnotation: string(raw)}, "1", "3Gi"),
	}
	for round := range 3 {
		for _, pod := range pods {
			ask, err := ReadPodWith(pod, index)
			if err != nil {
				t.Fatal(err)
			}
			// What reading the text afresh answers for this pod.
			fresh := &PodAsk{Workload: ask.Workload, Objective: ask.Objective, VCPUs: ask.VCPUs, MemoryBytes: ask.MemoryBytes}
			text, source := pod.Annotations[RecommendationAnnotation], "the pod's "+RecommendationAnnotation
			if text == "" {
				if found, ok := index.Lookup(*ask.Workload, ask.Objective); ok {
					text, source = string(found), "the published "+RecommendationKind
				}
			}
			want, _, why := readRecommendation(text, source, fresh)
			got, _, gotWhy := readRecommendationOnce(text, source, fresh)
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(want)
			if string(gotJSON) != string(wantJSON) || gotWhy != why {
				t.Fatalf("round %d, pod %s: remembered %s %q, read afresh %s %q", round, pod.Name, gotJSON, gotWhy, wantJSON, why)
			}
		}
	}
	a, _ := ReadPodWith(pods[0], index)
	b, _ := ReadPodWith(pods[1], index)
	c, _ := ReadPodWith(pods[2], index)
	g, _ := ReadPodWith(pods[6], index)
	switch {
	case a.Fallback != nil || a.DRAMBytes != 2<<30 || a.LLCWays != 4 || *a.RecommendationID != "r-9":
		t.Fatalf("pod a: %+v", a)
	case &a.Plan[0] != &b.Plan[0]:
		t.Fatal("two pods of the same workload, objective and vCPUs read the text twice")
	case c.VCPUs != 3 || c.Fallback != nil:
		t.Fatalf("pod c (3 vCPUs): %+v", c)
	case g.Fallback == nil || !strings.Contains(*g.Fallback, "another workload"):
		t.Fatalf("a pinned text for another workload: %+v", g)
	}
}

// A recommendation is the program's shape; the pod's memory request is its size. A pod asking for
// 4 GiB with a recommendation made from a 32 MiB trace is given 4 GiB in all, split by the ratio,
// and each structure keeps its share of its tier.
func TestAPodIsGivenItsOwnRequestSplitByTheRecommendation(t *testing.T) {
	const mib = int64(1) << 20
	rec := fmt.Sprintf(`{"schema":"tmc.recommendation/v1","workload":"stream","objective":"cheapest","recommendation_id":"r-1",`+
		`"dram_bytes":%d,"slow_bytes":%d,"llc_ways":3,"slow_ratio":0.25,`+
		`"plan":[{"tag":"array","fast_bytes":%d,"slow_bytes":%d},{"tag":"hot","fast_bytes":%d,"slow_bytes":0}]}`,
		24*mib, 8*mib, 8*mib, 8*mib, 16*mib)
	index := NewRecommendationIndex()
	var spec map[string]any
	if err := json.Unmarshal([]byte(rec), &spec); err != nil {
		t.Fatal(err)
	}
	index.Set("stream-cheapest", spec)
	for _, c := range []struct {
		name, memory     string
		dram, slow       int64
		array, hot, cold int64 // array's fast, hot's fast, array's slow
		below            bool
	}{
		{"4Gi", "4Gi", 3 << 30, 1 << 30, 1 << 30, 2 << 30, 1 << 30, false},
		{"the profile's own size", "32Mi", 24 * mib, 8 * mib, 8 * mib, 16 * mib, 8 * mib, false},
		{"below the profile", "16Mi", 12 * mib, 4 * mib, 4 * mib, 8 * mib, 4 * mib, true},
	} {
		pod := tieredPod("s", map[string]string{WorkloadAnnotation: "stream"}, "1", c.memory)
		ask, err := ReadPodWith(pod, index)
		if err != nil || ask.Fallback != nil {
			t.Fatalf("%s: %+v, %v", c.name, ask, err)
		}
		if ask.DRAMBytes != c.dram || ask.SlowBytes != c.slow || ask.DRAMBytes+ask.SlowBytes != ask.MemoryBytes {
			t.Errorf("%s: DRAM %d slow %d, want %d and %d (the pod's %d in all)", c.name, ask.DRAMBytes, ask.SlowBytes, c.dram, c.slow, ask.MemoryBytes)
		}
		if ask.Plan[0].FastBytes != c.array || ask.Plan[1].FastBytes != c.hot || ask.Plan[0].SlowBytes != c.cold {
			t.Errorf("%s: plan %+v", c.name, ask.Plan)
		}
		if ask.ProfileBytes != 32*mib || ask.BelowProfile() != c.below || ask.SlowRatio != 0.25 || ask.LLCWays != 3 {
			t.Errorf("%s: profile %d, below %v, ratio %v, ways %d", c.name, ask.ProfileBytes, ask.BelowProfile(), ask.SlowRatio, ask.LLCWays)
		}
	}
	// A pod that requests no memory is given the profile's bytes, as recommended.
	none := tieredPod("s", map[string]string{WorkloadAnnotation: "stream"}, "1", "0")
	ask, err := ReadPodWith(none, index)
	if err != nil || ask.DRAMBytes != 24*mib || ask.SlowBytes != 8*mib || ask.Plan[0].FastBytes != 8*mib {
		t.Fatalf("no memory request: %+v, %v", ask, err)
	}
}

// Sizing never places more in a tier than the configuration holds, at any size and ratio, and
// the tiers always add up to the pod's request.
func TestSizingKeepsThePlanWithinItsTiers(t *testing.T) {
	rec := &Recommendation{DRAMBytes: 7, SlowBytes: 5, SlowRatio: 5.0 / 12, LLCWays: 1,
		Plan: []StructurePlan{{Tag: "a", FastBytes: 3, SlowBytes: 2}, {Tag: "b", FastBytes: 4, SlowBytes: 3}}}
	for _, memory := range []int64{1, 2, 3, 11, 12, 13, 1000, 1<<40 + 3, MaxBytes - 1} {
		dram, slow, plan := SizeToPod(rec, memory)
		var fast, slowSum int64
		for _, s := range plan {
			fast += s.FastBytes
			slowSum += s.SlowBytes
		}
		if dram+slow != memory || dram < 0 || slow < 0 || fast > dram || slowSum > slow {
			t.Errorf("%d bytes: DRAM %d slow %d, plan %d and %d", memory, dram, slow, fast, slowSum)
		}
	}
	// The split is model.resources.split_memory's: DRAM is round((1 - ratio) x size), half to even.
	if dram, slow, _ := SizeToPod(&Recommendation{DRAMBytes: 1, SlowBytes: 1, SlowRatio: 0.5}, 5); dram != 2 || slow != 3 {
		t.Errorf("5 bytes at 0.5: DRAM %d slow %d, want 2 and 3 as Python's round", dram, slow)
	}
}

// The pod's ask counts what the in-tree fit counts: sidecars (restartable init containers) with
// the containers, and the pod's overhead.
func TestTheAskCountsSidecarsAndOverhead(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	sidecar := container(map[v1.ResourceName]string{v1.ResourceCPU: "1", v1.ResourceMemory: "1Gi"}, nil)
	sidecar.RestartPolicy = &always
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers: []v1.Container{container(
			map[v1.ResourceName]string{v1.ResourceCPU: "2", v1.ResourceMemory: "2Gi", OptInResource: "1"},
			map[v1.ResourceName]string{OptInResource: "1"})},
		InitContainers: []v1.Container{sidecar},
		Overhead:       v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")},
	}}
	ask, err := ReadPod(pod)
	if err != nil || !ask.OptedIn || ask.VCPUs != 3 || ask.MemoryBytes != 3<<30+512<<20 {
		t.Fatalf("%+v, %v", ask, err)
	}
}
