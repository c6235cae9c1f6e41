package tmc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// gate is a client rate limiter that holds each request until it is opened: the queue a busy
// client (or API server) keeps a request in.
type gate struct{ open chan struct{} }

func (g *gate) TryAccept() bool { return false }
func (g *gate) Accept()         { <-g.open }
func (g *gate) Stop()           {}
func (g *gate) QPS() float32    { return 1 }
func (g *gate) Wait(ctx context.Context) error {
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A Binding that waited in the client's queue while the lease passed to another replica never
// reaches the API server: the lease is checked as the request leaves, after every wait. Other
// requests pass.
func TestABindingQueuedPastTheLeaseIsNeverSent(t *testing.T) {
	leases := fake.NewSimpleClientset()
	args := &FenceArgs{Namespace: "tmc", Name: "placement", LeaseDurationSeconds: int64p(3), RenewDeadlineSeconds: int64p(2), RetryPeriodSeconds: int64p(1)}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	fence, err := NewFence(ctx, leases, args)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fence.Held() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("never acquired: %v", fence.Held())
		}
		time.Sleep(20 * time.Millisecond)
	}

	var bindings, others atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			bindings.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
			return
		}
		others.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default"}}`))
	}))
	defer server.Close()
	limiter := &gate{open: make(chan struct{})}
	cfg := &rest.Config{Host: server.URL, RateLimiter: limiter}
	cfg.Wrap(fence.BindingTransport)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	binding := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Target: v1.ObjectReference{Kind: "Node", Name: "n"}}

	// Checked before the call, as Engine.Bind does: held. Then the request queues, and the
	// replica stops renewing (a pause) until the lease may have passed.
	if err := fence.Held(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- client.CoreV1().Pods("default").Bind(context.Background(), binding, metav1.CreateOptions{})
	}()
	stop()
	time.Sleep(2200 * time.Millisecond)
	close(limiter.open)
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("a Binding queued past the lease: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Binding never returned")
	}
	if bindings.Load() != 0 {
		t.Fatalf("%d Binding(s) reached the API server after the lease passed", bindings.Load())
	}
	// Other requests are not the fence's.
	if _, err := client.CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{}); err != nil || others.Load() != 1 {
		t.Fatalf("a read through the fenced client: %v (%d)", err, others.Load())
	}
	// Without a fence, the transport is the client's own.
	var none *Fence
	if rt := none.BindingTransport(http.DefaultTransport); rt != http.DefaultTransport {
		t.Fatal("a nil fence wrapped the transport")
	}
}
