package tmc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
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
