package tmc

// Queueing hints: which cluster events may make a pod the plugin refused placeable. They only
// read: the cache and the recommendation index change in the informers' handlers alone.

import (
	"context"
	"maps"
	"reflect"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// RecommendationEvents names the published recommendations for kube-scheduler's event handlers
// (<plural>.<version>.<group>: it watches them with a dynamic informer).
const RecommendationEvents fwk.EventResource = "tieredrecommendations.v1alpha1." + Group

// EventsToRegister: what may make a pod this plugin refused placeable. A pod waiting for its
// pair's object moves when an object for its pair is added or updated (RecommendationHint);
// a pod refused for room moves when another pod goes (its reservation freed: a deletion, or a
// bound pod finishing, which the scheduler's informer sees as one: PodDeletedHint) or a node
// comes or changes (capacity, readiness, pattern); a pod moves when its labels or what it names
// or asks change (PodHint).
//
// The hints only read. kube-scheduler calls them once per pending pod for every event, on its
// own informers, which are not the plugin's: the pod a hint moves may be tried before the
// plugin's handlers have run. Fit and Reserve judge without the pods the informer's store no
// longer holds (Engine.gone), and the recommendation informer's handler moves the pods waiting
// for a pair when it records the pair's object (activateWaiting), so neither needs the hint to
// write.
func (p *TmcPlacement) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: RecommendationEvents, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: RecommendationHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: PodDeletedHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: PodHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.All}},
	}, nil
}

// PodDeletedHint queues a pod when another pod goes (what it held is freed); the pod's own
// deletion moves nothing.
func PodDeletedHint(_ klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	gone := asPod(oldObj)
	if gone != nil && pod != nil && gone.UID == pod.UID {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// PodHint: the pod's own update moves it only when its labels, annotations or spec changed
// (whether it is tmc's, what it names or asks); its status, which the scheduler itself writes
// when it refuses the pod, does not. Another pod's update moves it only when that pod ended (what it held is freed).
func PodHint(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	updated, ok := newObj.(*v1.Pod)
	if !ok || pod == nil {
		return fwk.Queue, nil
	}
	before, _ := oldObj.(*v1.Pod)
	if updated.UID == pod.UID {
		if before == nil || !maps.Equal(before.Labels, updated.Labels) || !maps.Equal(before.Annotations, updated.Annotations) ||
			!reflect.DeepEqual(before.Spec, updated.Spec) {
			return fwk.Queue, nil
		}
		return fwk.QueueSkip, nil
	}
	if updated.Status.Phase == v1.PodSucceeded || updated.Status.Phase == v1.PodFailed {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// RecommendationHint queues a pod when the object added or updated is its pair's (the pod's
// workload and its objective, canonical as the publisher names it); any other object cannot
// change what the pod waits for.
func RecommendationHint(_ klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	u, ok := newObj.(*unstructured.Unstructured)
	if !ok || pod == nil {
		return fwk.Queue, nil // not what was expected: queueing is the safe answer
	}
	workload, _, _ := unstructured.NestedString(u.Object, "spec", "workload")
	objective, _, _ := unstructured.NestedString(u.Object, "spec", "objective")
	want := pod.Annotations[WorkloadAnnotation]
	if want == "" || want != workload {
		return fwk.QueueSkip, nil
	}
	given := pod.Annotations[ObjectiveAnnotation]
	if given == "" {
		given = defaultObjective
	}
	if canonical(given) != objective {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// activateWaiting moves the pods waiting for a pair's object to the active queue, once the
// plugin's index holds the object: kube-scheduler's event for the object may have moved them
// before (RecommendationHint), and a pod tried then was refused again, to wait for an event
// that has passed. A pod not in the unschedulable or backoff queue is left alone; one being
// scheduled is tried again when its cycle ends.
func (p *TmcPlacement) activateWaiting(activator fwk.PodActivator, workload, objective string) {
	if activator == nil || p.Engine == nil || p.waiting == nil {
		return
	}
	pods := p.waiting(workload, objective)
	if len(pods) == 0 {
		return
	}
	moved := make(map[string]*v1.Pod, len(pods))
	for _, pod := range pods {
		moved[pod.Namespace+"/"+pod.Name] = pod
	}
	activator.Activate(klog.Background(), moved)
}
