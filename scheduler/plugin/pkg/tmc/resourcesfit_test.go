package tmc

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// draHandle is the one part of a framework handle NodeResourcesFit reads when it is built
// (DRA-backed extended resources are on by default in v1.36): no DRA objects.
type draHandle struct{ fwk.Handle }

func (draHandle) SharedDRAManager() fwk.SharedDRAManager { return nil }

func fitArgs(t testing.TB, raw string) runtime.Object {
	t.Helper()
	return &runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON}
}

func newResourcesFit(t testing.TB) *ResourcesFit {
	t.Helper()
	p, err := NewResourcesFit(context.Background(), fitArgs(t, `{"ignoredResources":["tmc.dev/tiered"]}`), draHandle{})
	if err != nil {
		t.Fatal(err)
	}
	return p.(*ResourcesFit)
}

func cpuNode(name string, cpus int64) fwk.NodeInfo {
	info := framework.NewNodeInfo()
	info.SetNode(&v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: *resource.NewQuantity(cpus, resource.DecimalSI), v1.ResourceMemory: resource.MustParse("24Gi"),
			v1.ResourcePods: resource.MustParse("110"),
		}},
	})
	return info
}

func fitPod(cpu string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("1Gi"), OptInResource: resource.MustParse("1")},
			Limits:   v1.ResourceList{OptInResource: resource.MustParse("1")},
		}}}},
	}
}

// TestResourcesFitIsNodeResourcesFitWithoutTheOptIn: CPU and memory are still checked and
// scored as the in-tree plugin does; the opt-in resource, which no node advertises, is not a
// reason to refuse; the pod given is not changed.
func TestResourcesFitIsNodeResourcesFitWithoutTheOptIn(t *testing.T) {
	ctx := context.Background()
	p := newResourcesFit(t)
	if p.Name() != ResourcesFitName {
		t.Fatalf("name %q", p.Name())
	}
	pod := fitPod("2")
	before := pod.DeepCopy()
	state := framework.NewCycleState()
	if _, s := p.PreFilter(ctx, state, pod, nil); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	if s := p.Filter(ctx, state, pod, cpuNode("big", 4)); !s.IsSuccess() {
		t.Errorf("a node with room refused: %v", s)
	}
	s := p.Filter(ctx, state, pod, cpuNode("small", 1))
	if s.Code() != fwk.UnschedulableAndUnresolvable || !reflect.DeepEqual(s.Reasons(), []string{"Insufficient cpu"}) {
		t.Errorf("a node with one CPU: %v", s)
	}
	if !reflect.DeepEqual(pod, before) {
		t.Error("PreFilter changed the pod it was given")
	}
	// Scores as the in-tree plugin does for the same pod.
	nodes := []fwk.NodeInfo{cpuNode("a", 4), cpuNode("b", 12)}
	if s := p.PreScore(ctx, state, pod, nodes); !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	a, _ := p.Score(ctx, state, pod, nodes[0])
	b, _ := p.Score(ctx, state, pod, nodes[1])
	if a >= b {
		t.Errorf("least allocated: the 12-CPU node scores %d, the 4-CPU one %d", b, a)
	}
}

// TestResourcesFitArgumentsAreNodeResourcesFits: defaults as kube-scheduler's, and its
// validation (an unknown scoring strategy is refused, not defaulted).
func TestResourcesFitArgumentsAreNodeResourcesFits(t *testing.T) {
	args, err := resourcesFitArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if args.ScoringStrategy == nil || args.ScoringStrategy.Type != "LeastAllocated" || len(args.ScoringStrategy.Resources) != 2 {
		t.Errorf("defaults: %+v", args.ScoringStrategy)
	}
	if _, err := NewResourcesFit(context.Background(), fitArgs(t, `{"scoringStrategy":{"type":"Cheapest"}}`), draHandle{}); err == nil {
		t.Error("an unknown scoring strategy was accepted")
	}
	if _, err := NewResourcesFit(context.Background(), fitArgs(t, `{"ignoredResources":`), draHandle{}); err == nil {
		t.Error("unreadable arguments were accepted")
	}
}

func TestWithoutOptInLeavesOtherPodsAlone(t *testing.T) {
	pod := fitPod("1")
	delete(pod.Spec.Containers[0].Resources.Requests, OptInResource)
	delete(pod.Spec.Containers[0].Resources.Limits, OptInResource)
	if withoutOptIn(pod) != pod {
		t.Error("a pod without the opt-in resource was copied")
	}
	stripped := withoutOptIn(fitPod("1"))
	if _, ok := stripped.Spec.Containers[0].Resources.Requests[OptInResource]; ok {
		t.Error("the opt-in request is still there")
	}
	if _, ok := stripped.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]; !ok {
		t.Error("the CPU request went too")
	}
}

// BenchmarkResourcesFitFilterOver5000Nodes is NodeResourcesFit's Filter for an opted-in pod
// over 5,000 nodes: the in-tree plugin on the pod as it is, and this one.
func BenchmarkResourcesFitFilterOver5000Nodes(b *testing.B) {
	ctx := context.Background()
	nodes := make([]fwk.NodeInfo, 5000)
	for i := range nodes {
		nodes[i] = cpuNode(fmt.Sprint("n", i), 12)
	}
	p := newResourcesFit(b)
	pod := fitPod("1")
	for _, run := range []struct {
		name      string
		preFilter func(fwk.CycleState) *fwk.Status
	}{
		{"in-tree", func(s fwk.CycleState) *fwk.Status { _, st := p.Fit.PreFilter(ctx, s, pod, nil); return st }},
		{"tmc", func(s fwk.CycleState) *fwk.Status { _, st := p.PreFilter(ctx, s, pod, nil); return st }},
	} {
		b.Run(run.name, func(b *testing.B) {
			for range b.N {
				state := framework.NewCycleState()
				run.preFilter(state)
				for _, n := range nodes {
					if s := p.Filter(ctx, state, pod, n); !s.IsSuccess() {
						b.Fatal(s)
					}
				}
			}
		})
	}
}
