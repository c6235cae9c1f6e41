package tmc

// Queueing hints: which cluster events may make a pod the plugin refused placeable.

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
// bound pod finishing, which the scheduler's informer sees as one) or a node comes or changes
// (capacity, readiness, pattern); a pod moves when what it names or asks changes (PodHint).
func (p *TmcPlacement) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: RecommendationEvents, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.recommendationHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.podDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: p.podUpdated},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.All}},
	}, nil
}

// recommendationHint is RecommendationHint, and for an object that moves a pod it also records
// the object in the plugin's index: kube-scheduler's informer and the plugin's are two watches,
// and the pod it moves may be tried again before the plugin's own informer has the object (it
// would then be refused again, and wait for an event that has passed).
func (p *TmcPlacement) recommendationHint(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	hint, err := RecommendationHint(logger, pod, oldObj, newObj)
	if hint == fwk.Queue {
		if index, ok := p.published.(*RecommendationIndex); ok {
			if u, ok := newObj.(*unstructured.Unstructured); ok {
				spec, _, _ := unstructured.NestedMap(u.Object, "spec")
				index.Set(u.GetName(), spec)
			}
		}
	}
	return hint, err
}

// podDeleted queues a pod when another pod goes, and releases the gone pod's reservation in the
// engine's cache first: the engine's informer handler and kube-scheduler's are two listeners,
// and the pod moved here may be tried again before the engine's handler has freed the room (it
// would then be refused again, and wait for an event that has passed). Only a pod that was on
// a node is released (a pending pod's "delete" as it is bound is not a release); releasing twice
// is harmless.
func (p *TmcPlacement) podDeleted(_ klog.Logger, pod *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	gone := asPod(oldObj)
	if gone == nil {
		return fwk.Queue, nil
	}
	if pod != nil && gone.UID == pod.UID {
		return fwk.QueueSkip, nil
	}
	if gone.Spec.NodeName != "" && p.Engine != nil && p.cache != nil {
		p.cache.Release(gone.UID)
	}
	return fwk.Queue, nil
}

// podUpdated is PodHint, and for another pod that ended it also releases what that pod held in
// the engine's cache first, for the reason podDeleted does.
func (p *TmcPlacement) podUpdated(logger klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	hint, err := PodHint(logger, pod, oldObj, newObj)
	if ended := asPod(newObj); hint == fwk.Queue && ended != nil && (pod == nil || ended.UID != pod.UID) && p.Engine != nil && p.cache != nil {
		p.ObservePod(ended) // a finished pod's reservation is released
	}
	return hint, err
}

// PodHint: the pod's own update moves it only when its annotations or spec changed (what it
// names or asks); its status, which the scheduler itself writes when it refuses the pod, does
// not. Another pod's update moves it only when that pod ended (what it held is freed).
func PodHint(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	updated, ok := newObj.(*v1.Pod)
	if !ok || pod == nil {
		return fwk.Queue, nil
	}
	before, _ := oldObj.(*v1.Pod)
	if updated.UID == pod.UID {
		if before == nil || !maps.Equal(before.Annotations, updated.Annotations) || !reflect.DeepEqual(before.Spec, updated.Spec) {
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
