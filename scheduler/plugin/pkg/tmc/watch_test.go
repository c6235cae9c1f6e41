package tmc

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// The cache follows the API server through the informers kube-scheduler shares with its plugins:
// bound pods' placements already there when it starts, pods bound and deleted while it runs, and
// the nodes' rack pools.
func TestWatchFeedsTheCacheFromInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := tmcNode("b", 8, 32<<30, 0, 8, "rack", 64<<30)
	placed := func(name, mask string, ways int, fromPool bool) *v1.Pod {
		pod := tieredPod(name, nil, "1", "1Gi")
		pod.Spec.NodeName = "b"
		ann, err := PlacementAnnotations(&Placement{
			Schema: PlacementSchema, Node: "b", Objective: "cheapest", LLCMask: mask, SlowFromPool: fromPool,
			Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 1 << 30, SlowBytes: 2 << 30, LLCWays: ways},
		})
		if err != nil {
			t.Fatal(err)
		}
		pod.Annotations = ann
		return pod
	}
	p, client := watched(ctx, t, node, placed("old", "0x3", 2, true))

	capacity, _ := ParseNodeCapacity(node.Labels, node.Annotations)
	eventually := func(what string, ok func(Usage) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			u := p.cache.Usage("b", capacity, 8)
			if ok(u) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, u)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	eventually("the pod bound before the start", func(u Usage) bool {
		return u.UsedMask == 0x3 && u.PoolSlowBytes == 64<<30 && u.UsedPoolSlowBytes == 2<<30
	})

	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, placed("new", "0xc", 2, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("a pod bound while running", func(u Usage) bool { return u.UsedMask == 0xf && u.UsedCPUs == 2 })

	if err := pods.Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("a deleted pod", func(u Usage) bool { return u.UsedMask == 0xc && u.UsedPoolSlowBytes == 0 })

	// A pod that is annotated but not bound (a hand-written annotation) is not counted.
	unbound := placed("unbound", "0x30", 2, false)
	unbound.Spec.NodeName = ""
	if _, err := pods.Create(ctx, unbound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	finished, _ := pods.Get(ctx, "new", metav1.GetOptions{})
	finished.Status.Phase = v1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, finished, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("a finished pod, and an unbound one", func(u Usage) bool { return u.UsedMask == 0 && u.UsedCPUs == 0 })
	if p.cache.Len() != 0 {
		t.Errorf("%d reservations left", p.cache.Len())
	}
}

// placedOnB is the pod bound to node b with a placement of one vCPU, 1 GiB of DRAM and two ways
// at mask, as tmc's Binding leaves it.
func placedOnB(t *testing.T, pod *v1.Pod, mask string) *v1.Pod {
	t.Helper()
	ann, err := PlacementAnnotations(&Placement{
		Schema: PlacementSchema, Node: "b", Objective: "cheapest", LLCMask: mask,
		Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 1 << 30, LLCWays: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.NodeName, pod.Annotations = "b", ann
	return pod
}

// watched is a plugin whose engine is fed by informers over a fake API server holding objects,
// synced before it is returned.
func watched(ctx context.Context, t *testing.T, objects ...runtime.Object) (*TmcPlacement, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objects...)
	p := &TmcPlacement{Engine: &Engine{client: client, cache: NewCache()}}
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := p.Watch(factory); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return p, client
}
