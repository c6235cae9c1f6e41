package tmc

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func int64p(v int64) *int64 { return &v }

func TestFenceArgsAreChecked(t *testing.T) {
	client := fake.NewSimpleClientset()
	if f, err := NewFence(context.Background(), client, nil); f != nil || err != nil {
		t.Fatalf("no lease configured: %v %v", f, err)
	}
	for _, args := range []FenceArgs{
		{Namespace: "", Name: "x"},
		{Namespace: "tmc", Name: "Not A Name"},
		{Namespace: "tmc", Name: "x", LeaseDurationSeconds: int64p(5), RenewDeadlineSeconds: int64p(5)},
		{Namespace: "tmc", Name: "x", RetryPeriodSeconds: int64p(0)},
		{Namespace: "tmc", Name: "x", LeaseDurationSeconds: int64p(301), RenewDeadlineSeconds: int64p(10)},
	} {
		if _, err := NewFence(context.Background(), client, &args); err == nil {
			t.Errorf("%+v accepted", args)
		}
	}
}

// A replica binds only while it holds the lease freshly renewed: one that stopped renewing (as a
// paused process does) refuses to bind once the lease may have passed to another, and a second
// replica cannot take the lease before then.
func TestFenceRefusesOnceTheLeaseMayHavePassed(t *testing.T) {
	client := fake.NewSimpleClientset()
	args := &FenceArgs{Namespace: "tmc", Name: "placement", LeaseDurationSeconds: int64p(3), RenewDeadlineSeconds: int64p(2), RetryPeriodSeconds: int64p(1)}
	ctx, stop := context.WithCancel(context.Background())
	first, err := NewFence(ctx, client, args)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Held(); err == nil || !strings.Contains(err.Error(), "does not hold") || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("before acquiring: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for first.Held() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("never acquired: %v", first.Held())
		}
		time.Sleep(20 * time.Millisecond)
	}
	second, err := NewFence(context.Background(), client, args)
	if err != nil {
		t.Fatal(err)
	}
	second.Campaign()
	stop() // the first stops renewing, without releasing: a pause, as far as the lease sees
	time.Sleep(2200 * time.Millisecond)
	if err := first.Held(); err == nil || !strings.Contains(err.Error(), "not renewed in time") || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a replica that stopped renewing still binds: %v", err)
	}
	if second.Held() == nil {
		t.Fatal("the second replica holds the lease before it expired")
	}
	deadline = time.Now().Add(6 * time.Second)
	for second.Held() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the second replica never took over: %v", second.Held())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A replica that releases when idle (the extender, beside a scheduler that may stop calling it)
// gives the lease up once it is no longer asked to place pods, well before the lease would
// expire, so another replica binds at once; asked again, it contends again.
func TestFenceReleasedWhenIdle(t *testing.T) {
	client := fake.NewSimpleClientset()
	args := &FenceArgs{Namespace: "tmc", Name: "placement", LeaseDurationSeconds: int64p(30), RenewDeadlineSeconds: int64p(20), RetryPeriodSeconds: int64p(1)}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first, err := NewFence(ctx, client, args)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.ReleaseWhenIdle(0); err == nil {
		t.Fatal("a zero idle time accepted")
	}
	if err := first.ReleaseWhenIdle(time.Second); err != nil {
		t.Fatal(err)
	}
	waitHeld := func(f *Fence, ask bool, within time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if ask {
				f.Campaign()
			}
			if f.Held() == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, f.Held())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitHeld(first, true, 5*time.Second, "the first replica never acquired the lease")
	second, err := NewFence(ctx, client, args)
	if err != nil {
		t.Fatal(err)
	}
	// The first is not asked any more: within the idle time and a tick it lets go, and the
	// second, contending every retry period, holds the lease long before 30 s.
	waitHeld(second, true, 6*time.Second, "the second replica never took the released lease")
	if err := first.Held(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the idle replica still binds: %v", err)
	}
}

// Two replicas against one API server, the second taking over while the first is paused: the
// first's cache is stale (it never saw the second's binds). Without the placement lease the
// resumed replica binds a pod onto the ways the other gave away; with it, it binds nothing.
func TestAStaleReplicaOvercommitsWithoutTheLeaseAndBindsNothingWithIt(t *testing.T) {
	args := &FenceArgs{Namespace: "tmc", Name: "placement", LeaseDurationSeconds: int64p(3), RenewDeadlineSeconds: int64p(2), RetryPeriodSeconds: int64p(1)}
	for _, fenced := range []bool{false, true} {
		h := newHarness(t, tmcNode("n1", 16, 64<<30, 0, 4, "", 0))
		stale := h.plugin
		fresh := h.restart()
		if fenced {
			pause, resume := context.WithCancel(context.Background())
			first, err := NewFence(pause, h.client, args)
			if err != nil {
				t.Fatal(err)
			}
			SetFence(stale.Engine, first)
			deadline := time.Now().Add(5 * time.Second)
			for first.Campaign(); first.Held() != nil; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the first replica never acquired the lease: %v", first.Held())
				}
			}
			resume() // paused: it renews no more (and releases nothing)
			second, err := NewFence(context.Background(), h.client, args)
			if err != nil {
				t.Fatal(err)
			}
			SetFence(fresh.Engine, second)
			deadline = time.Now().Add(8 * time.Second)
			for second.Campaign(); second.Held() != nil; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the second replica never took over: %v", second.Held())
				}
			}
		}
		h.plugin = fresh // the new leader places a pod: the fallback takes every free way
		if node, st := h.schedule(tieredPod("x", nil, "1", "1Gi")); !st.IsSuccess() || node != "n1" {
			t.Fatalf("the new leader: %q %v", node, st)
		}
		h.plugin = stale // resumed: its cache still has every way free
		_, st := h.schedule(tieredPod("y", nil, "1", "1Gi"))
		bound, err := h.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var masks []string
		for _, p := range bound.Items {
			if p.Spec.NodeName != "" {
				masks = append(masks, p.Name+"="+p.Annotations[LLCMaskAnnotation])
			}
		}
		if !fenced {
			// The control: what the lease prevents.
			if !st.IsSuccess() || len(masks) != 2 {
				t.Fatalf("without the lease, the stale replica was expected to over-commit: %v %v", st, masks)
			}
			continue
		}
		if st.IsSuccess() || !strings.Contains(st.Message(), "placement lease") || len(masks) != 1 {
			t.Fatalf("with the lease, the stale replica bound: %v %v", st, masks)
		}
	}
}

// A renewal is dated by its request, not by its answer: a replica paused while its renewal was
// out (the API server wrote it at once; the answer is read on resume, after the lease may have
// passed to another replica) must not take the late answer for a fresh lease. Once it renews
// again in time, it binds again.
func TestFenceDatesARenewalByItsRequest(t *testing.T) {
	client := fake.NewSimpleClientset()
	var late atomic.Bool
	answered := make(chan struct{}, 1)
	const pause = 3500 * time.Millisecond // longer than the lease
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if !late.CompareAndSwap(true, false) {
			return false, nil, nil
		}
		_, obj, err := k8stesting.ObjectReaction(client.Tracker())(action)
		time.Sleep(pause) // written; the answer waits
		answered <- struct{}{}
		return true, obj, err
	})
	args := &FenceArgs{Namespace: "tmc", Name: "placement", LeaseDurationSeconds: int64p(3), RenewDeadlineSeconds: int64p(2), RetryPeriodSeconds: int64p(1)}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	f, err := NewFence(ctx, client, args)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.Held() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("never acquired: %v", f.Held())
		}
		time.Sleep(20 * time.Millisecond)
	}
	late.Store(true)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the renewal was never made")
	}
	// The answer is being read: for the next moments the elector holds a record it believes
	// fresh. The lease was last written 3.5 s ago, longer than it lasts.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if err := f.Held(); err == nil || !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "not renewed in time") {
			t.Fatalf("a renewal answered after the lease could have passed counts as fresh: %v", err)
		}
	}
	deadline = time.Now().Add(6 * time.Second)
	for f.Held() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("never renewed again: %v", f.Held())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
