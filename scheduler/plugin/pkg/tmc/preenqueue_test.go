package tmc

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// timers records the timers a wait room starts and runs them when told.
type timers struct {
	after []time.Duration
	fire  []func()
}

type timer struct{ stopped *bool }

func (t timer) Stop() bool { *t.stopped = true; return true }

func (ts *timers) start(d time.Duration, f func()) stopper {
	ts.after = append(ts.after, d)
	ts.fire = append(ts.fire, f)
	return timer{stopped: new(bool)}
}

func waitingPlugin(wait time.Duration, now *time.Time) (*TmcPlacement, *RecommendationIndex, *activations, *events.FakeRecorder, *timers) {
	index := NewRecommendationIndex()
	p := &TmcPlacement{Engine: &Engine{cache: NewCache(), published: index, wait: wait, now: func() time.Time { return *now }}}
	moved, recorder, started := &activations{}, events.NewFakeRecorder(10), &timers{}
	p.room = newWaitRoom(moved, recorder)
	p.room.after = started.start
	index.OnPublished(func(workload, objective string) { p.activateWaiting(moved, workload, objective) })
	return p, index, moved, recorder, started
}

func recorded(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A pod of an unpublished pair waits in PreEnqueue (never attempted, so no FailedScheduling),
// with one Normal event naming the pair however often the queue asks; pods that wait for
// nothing are let in without an event.
func TestPreEnqueueKeepsAPodWaitingForItsPair(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, _, _, recorder, started := waitingPlugin(WaitUntilPublished, &now)
	pod := tieredPod("p", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5.000%"}, "1", "1Gi")
	pod.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	for range 3 {
		status := p.PreEnqueue(context.Background(), pod)
		if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(status.Message(), `waiting for the recommendation of workload "graph500", objective "slo:5`) {
			t.Fatalf("a pod of an unpublished pair: %v", status)
		}
	}
	got := recorded(recorder)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Normal "+WaitingReason+" ") ||
		!strings.Contains(got[0], `workload "graph500", objective "slo:5%"`) {
		t.Fatalf("events %q, want one Normal event naming the pair", got)
	}
	if len(started.after) != 0 {
		t.Errorf("a wait until published started timers: %v", started.after)
	}
	for _, other := range []map[string]string{
		nil, // names no workload
		{WorkloadAnnotation: "graph500", RecommendationAnnotation: `{"schema":1}`}, // pins its own
	} {
		if status := p.PreEnqueue(context.Background(), tieredPod("q", other, "1", "1Gi")); !status.IsSuccess() {
			t.Errorf("a pod that waits for nothing (%v): %v", other, status)
		}
	}
	plain := tieredPod("plain", map[string]string{WorkloadAnnotation: "graph500"}, "1", "1Gi")
	plain.Spec.Containers[0].Resources.Requests = nil
	plain.Spec.Containers[0].Resources.Limits = nil
	if status := p.PreEnqueue(context.Background(), plain); !status.IsSuccess() {
		t.Errorf("a pod that is not tmc's: %v", status)
	}
	if got := recorded(recorder); len(got) != 0 {
		t.Errorf("events for pods that wait for nothing: %q", got)
	}
}

// The pair's object, recorded by the plugin's informer handler, moves the waiting pod; the
// queue asks PreEnqueue again, which lets it in, and PreFilter reads the published object.
func TestPreEnqueueLetsTheWaitingPodInOnceItsPairIsPublished(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, index, moved, _, _ := waitingPlugin(WaitUntilPublished, &now)
	pod := tieredPod("waiting", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5.000%"}, "1", "1Gi")
	client := fake.NewClientset(pod)
	p.client = client
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := p.Watch(factory); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	if status := p.PreEnqueue(ctx, pod); status.IsSuccess() {
		t.Fatal("let in before its pair is published")
	}
	index.Handler().OnAdd(published("graph500-slo", graph500Spec(2)), false)
	if len(moved.pods) != 1 || moved.pods[0] != "default/waiting" {
		t.Fatalf("moved %v, want the waiting pod", moved.pods)
	}
	if status := p.PreEnqueue(ctx, pod); !status.IsSuccess() {
		t.Fatalf("once published: %v", status)
	}
	if n := p.room.waiting(); n != 0 {
		t.Errorf("%d pods still held after the pod was let in", n)
	}
	state := framework.NewCycleState()
	if _, status := p.PreFilter(ctx, state, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter: %v", status)
	}
	if s, err := readState(state); err != nil || s.ask.Fallback != nil || s.ask.LLCWays != 2 {
		t.Fatalf("the published recommendation expected: %+v %v", s, err)
	}
}

// A bounded wait: the pod waits in PreEnqueue until its creation plus the wait, when a timer
// moves it; PreEnqueue then lets it in and PreFilter gives it the fallback.
func TestPreEnqueueFallsBackWhenTheBoundedWaitEnds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, _, moved, recorder, started := waitingPlugin(10*time.Second, &now)
	pod := tieredPod("young", map[string]string{WorkloadAnnotation: "graph500"}, "1", "1Gi")
	pod.CreationTimestamp = metav1.NewTime(now.Add(-3 * time.Second))
	if status := p.PreEnqueue(context.Background(), pod); status.IsSuccess() || !strings.Contains(status.Message(), "fallback after 10s") {
		t.Fatalf("a young pod of an unpublished pair: %v", status)
	}
	// Asked again (the pod updated): one event, one timer.
	p.PreEnqueue(context.Background(), pod)
	if got := recorded(recorder); len(got) != 1 {
		t.Errorf("events %q, want one", got)
	}
	if len(started.after) != 1 {
		t.Fatalf("timers %v, want one", started.after)
	}
	if d := started.after[0]; d != 7*time.Second {
		t.Errorf("timer after %v, want the 7 s the wait has left", d)
	}
	now = now.Add(7 * time.Second)
	started.fire[0]()
	if len(moved.pods) != 1 || moved.pods[0] != "default/young" {
		t.Fatalf("moved %v when the wait ended, want the pod", moved.pods)
	}
	if status := p.PreEnqueue(context.Background(), pod); !status.IsSuccess() {
		t.Fatalf("after the wait: %v", status)
	}
	state := framework.NewCycleState()
	if _, status := p.PreFilter(context.Background(), state, pod, nil); !status.IsSuccess() {
		t.Fatalf("PreFilter after the wait: %v", status)
	}
	if s, err := readState(state); err != nil || s.ask.Fallback == nil {
		t.Fatalf("the fallback expected: %+v %v", s, err)
	}
}

// A pod deleted (or bound elsewhere) while it waits is forgotten, its timer stopped.
func TestAWaitingPodThatGoesIsForgotten(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, _, _, _, _ := waitingPlugin(10*time.Second, &now)
	var stopped bool
	p.room.after = func(time.Duration, func()) stopper { return timer{stopped: &stopped} }
	pod := tieredPod("gone", map[string]string{WorkloadAnnotation: "graph500"}, "1", "1Gi")
	pod.CreationTimestamp = metav1.NewTime(now)
	p.PreEnqueue(context.Background(), pod)
	if p.room.waiting() != 1 {
		t.Fatal("the pod is not held")
	}
	p.room.handler().OnDelete(pod)
	if p.room.waiting() != 0 || !stopped {
		t.Errorf("held %d, timer stopped %v after the pod's deletion", p.room.waiting(), stopped)
	}
}
