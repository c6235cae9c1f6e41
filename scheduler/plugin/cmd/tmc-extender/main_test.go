package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func TestPlacementFenceFromFlags(t *testing.T) {
	base := options{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	client := fake.NewSimpleClientset()
	ctx := context.Background()

	fence, err := placementFence(ctx, client, base)
	if err != nil || fence != nil {
		t.Fatalf("no --placement-lease: want no fence, got %v, %v", fence, err)
	}

	good := base
	good.placementLease = "tmc-system/tmc-scheduler-placement"
	if fence, err = placementFence(ctx, client, good); err != nil || fence == nil {
		t.Fatalf("a valid lease: want a fence, got %v, %v", fence, err)
	}

	for name, change := range map[string]func(*options){
		"not namespace/name":        func(o *options) { o.placementLease = "just-a-name" },
		"not a DNS name":            func(o *options) { o.placementLease = "ns/Not_A_Name" },
		"a fraction of a second":    func(o *options) { o.leaseDuration = 1500 * time.Millisecond },
		"zero retry":                func(o *options) { o.retryPeriod = 0 },
		"renew deadline past lease": func(o *options) { o.renewDeadline = 20 * time.Second },
		"retry past renew deadline": func(o *options) { o.retryPeriod = 10 * time.Second },
		"a lease longer than 300 s": func(o *options) { o.leaseDuration = 301 * time.Second },
		"a negative renew deadline": func(o *options) { o.renewDeadline = -time.Second },
	} {
		o := good
		change(&o)
		if _, err := placementFence(ctx, client, o); err == nil || !strings.Contains(err.Error(), "placement") {
			t.Errorf("%s: want an error naming the placement lease flags, got %v", name, err)
		}
	}
}

func TestTheProfilerIsServedOnlyWhereAsked(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	address, err := serveProfiler(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + address + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("the goroutine profile: %d %.200s", resp.StatusCode, body)
	}
	if _, err := serveProfiler(ctx, "not an address"); err == nil {
		t.Fatal("a bad address accepted")
	}
}
