package tmc

// PreEnqueue: a tiered pod whose pair has no published recommendation waits in the scheduling
// queue, not in a scheduling cycle. The queue keeps a pod PreEnqueue rejects out of the active
// and backoff queues: it is not attempted, so it gets no FailedScheduling event and no error
// backoff. It moves when its pair's object is recorded (the recommendation informer's handler,
// activateWaiting, and the queueing hint on the object's event) or, for a bounded wait, when
// the wait ends (a timer per pod): PreEnqueue then lets it in, and PreFilter reads the published
// recommendation or the fallback as before.

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// WaitingReason is the reason of the Normal event a pod gets when it starts waiting for its
// recommendation: once per pod and wait, however often the queue asks again.
const WaitingReason = "WaitingForRecommendation"

// stopper is a timer that can be stopped (a *time.Timer).
type stopper interface{ Stop() bool }

// waitRoom holds the pods PreEnqueue keeps waiting: whether their event was recorded, and the
// timer that moves a pod whose bounded wait ends.
type waitRoom struct {
	mu   sync.Mutex
	pods map[types.UID]*waiter
	// activator moves a pod to the active queue (the framework handle); recorder records the
	// pod's Normal event (the handle's); after starts a timer (time.AfterFunc). Nil activator
	// or recorder: nothing is moved or recorded (an engine used without a framework).
	activator fwk.PodActivator
	recorder  events.EventRecorder
	after     func(time.Duration, func()) stopper
}

type waiter struct {
	until time.Time
	timer stopper
}

func newWaitRoom(activator fwk.PodActivator, recorder events.EventRecorder) *waitRoom {
	return &waitRoom{
		pods: map[types.UID]*waiter{}, activator: activator, recorder: recorder,
		after: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
	}
}

// PreEnqueue lets every pod into the queue but a tiered pod that waits for its pair's published
// recommendation (the engine's Ask refuses it as Waiting). Other refusals are PreFilter's, with
// their FailedScheduling events as before: they are verdicts, not waits.
func (p *TmcPlacement) PreEnqueue(_ context.Context, pod *v1.Pod) *fwk.Status {
	if p.Engine == nil || !p.mayWait(pod) {
		if p.room != nil && pod != nil && pod.Annotations[WorkloadAnnotation] != "" {
			p.room.leave(pod.UID)
		}
		return nil
	}
	_, refused := p.Ask(pod)
	if refused == nil || !refused.Waiting {
		if p.room != nil {
			p.room.leave(pod.UID)
		}
		return nil
	}
	if p.room != nil {
		p.room.wait(pod, refused, p.now())
	}
	return newStatus(fwk.UnschedulableAndUnresolvable, refused.Message)
}

// mayWait is what Ask needs to refuse a pod as Waiting, read without parsing anything: a pod
// asking for the tiered resource names a workload and pins no recommendation, the engine waits
// for the publisher, and the pair has no object. Most pods stop at the first annotation read;
// a pod this lets through is judged by Ask itself.
func (e *Engine) mayWait(pod *v1.Pod) bool {
	if pod == nil || e.published == nil || e.wait == 0 {
		return false
	}
	workload := pod.Annotations[WorkloadAnnotation]
	if workload == "" || pod.Spec.NodeName != "" || pod.Annotations[RecommendationAnnotation] != "" {
		return false
	}
	objective := pod.Annotations[ObjectiveAnnotation]
	if objective == "" {
		objective = defaultObjective
	}
	if _, found := e.published.Lookup(workload, canonical(objective)); found {
		return false
	}
	return requestsTiered(pod)
}

// wait records the pod's Normal event the first time it waits, and, for a bounded wait, makes
// sure a timer moves it when the wait ends. Called with the scheduling queue's lock held: the
// timer's Activate, which takes that lock, cannot run before the queue has put the pod among
// its waiting pods, however short the wait left.
func (r *waitRoom) wait(pod *v1.Pod, refused *Refusal, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, known := r.pods[pod.UID]
	if !known {
		w = &waiter{}
		r.pods[pod.UID] = w
		if r.recorder != nil {
			// The note is an argument, not the format: the objective's "%" reads as itself.
			r.recorder.Eventf(pod, nil, v1.EventTypeNormal, WaitingReason, "Scheduling", "%s", refused.Message)
		}
	}
	if refused.Until.IsZero() || r.activator == nil {
		return
	}
	if w.timer != nil && w.until.Equal(refused.Until) {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	// The timer fires no earlier than the wait's end as the engine reads it (both on this
	// machine's clock); should it find the pod still waiting (the wall clock stepped back),
	// PreEnqueue, asked again by the move, arms the next one.
	w.until = refused.Until
	moved := map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod}
	uid, activator := pod.UID, r.activator
	w.timer = r.after(refused.Until.Sub(now), func() {
		r.mu.Lock()
		if w := r.pods[uid]; w != nil {
			w.timer = nil
		}
		r.mu.Unlock()
		activator.Activate(klog.Background(), moved)
	})
}

// leave forgets a pod that no longer waits (let into the queue, bound, or deleted) and stops
// its timer.
func (r *waitRoom) leave(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.pods[uid]; ok {
		if w.timer != nil {
			w.timer.Stop()
		}
		delete(r.pods, uid)
	}
}

// waiting is the number of pods the room holds.
func (r *waitRoom) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pods)
}

// handler forgets the pods that leave the queue without PreEnqueue letting them in: deleted, or
// bound by another scheduler.
func (r *waitRoom) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod := asPod(obj); pod != nil && pod.Spec.NodeName != "" {
				r.leave(pod.UID)
			}
		},
		DeleteFunc: func(obj any) {
			if pod := asPod(obj); pod != nil {
				r.leave(pod.UID)
			}
		},
	}
}
