package tmc

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

func tieredPod(name string, ann map[string]string, cpu, memory string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Annotations: ann},
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
	// A request defaults to the limit; an init container larger than the containers' sum wins.
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers: []v1.Container{
			container(map[v1.ResourceName]string{v1.ResourceCPU: "1"}, map[v1.ResourceName]string{v1.ResourceMemory: "1Gi", OptInResource: "1"}),
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

func TestReadPodTooLarge(t *testing.T) {
	if _, err := ReadPod(tieredPod("huge", nil, "5000", "1Gi")); err == nil {
		t.Error("a pod asking for 5000 CPUs was read")
	}
	if _, err := ReadPod(tieredPod("huge", nil, "1", "4Pi")); err == nil {
		t.Error("a pod asking for 4 PiB was read")
	}
}
