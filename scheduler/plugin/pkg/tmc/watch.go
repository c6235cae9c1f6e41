package tmc

// The informers' event handlers: how the cache follows the API server (bound pods' placements,
// pods that end or go, nodes' capacity and rack pools).

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Watch feeds the cache from an informer factory's pods and nodes, and namespaces when the
// engine is limited to tenant namespaces (SetTenantNamespaces).
func (e *Engine) Watch(factory informers.SharedInformerFactory) error {
	core := factory.Core().V1()
	pods := core.Pods().Informer()
	if err := pods.AddIndexers(cache.Indexers{
		podUIDIndex: func(obj any) ([]string, error) {
			if pod := asPod(obj); pod != nil {
				return []string{string(pod.UID)}, nil
			}
			return nil, nil
		},
		podPairIndex: func(obj any) ([]string, error) {
			if key, ok := waitingFor(asPod(obj)); ok {
				return []string{key}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("%s: indexing pods: %w", Name, err)
	}
	indexer := pods.GetIndexer()
	e.podExists = func(uid types.UID) bool {
		found, err := indexer.ByIndex(podUIDIndex, string(uid))
		return err != nil || len(found) > 0 // an index error keeps the pod: never over-commit
	}
	e.waiting = func(workload, objective string) []*v1.Pod {
		found, _ := indexer.ByIndex(podPairIndex, pairKey(workload, objective))
		out := make([]*v1.Pod, 0, len(found))
		for _, obj := range found {
			if pod := asPod(obj); pod != nil {
				out = append(out, pod)
			}
		}
		return out
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.ObservePod(asPod(obj)) },
		UpdateFunc: func(_, obj any) { e.ObservePod(asPod(obj)) },
		DeleteFunc: func(obj any) {
			if pod := asPod(obj); pod != nil {
				e.cache.Release(pod.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("%s: watching pods: %w", Name, err)
	}
	if err := e.watchNamespaces(factory, indexer); err != nil {
		return err
	}
	if _, err := core.Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.ObserveNode(asNode(obj)) },
		UpdateFunc: func(_, obj any) { e.ObserveNode(asNode(obj)) },
		DeleteFunc: func(obj any) {
			if node := asNode(obj); node != nil {
				e.cache.RemoveNode(node.Name)
				e.cache.ForgetNode(node.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("%s: watching nodes: %w", Name, err)
	}
	return nil
}

// podUIDIndex indexes the pod informer's store by pod UID; podPairIndex indexes the pods not
// bound yet by the pair (workload, objective) whose published recommendation they read.
const (
	podUIDIndex  = "tmc.dev/pod-uid"
	podPairIndex = "tmc.dev/pod-pair"
)

// waitingFor is the pair a pod not bound yet reads its recommendation for, as an index key
// (pairKey); false for a bound pod or one that names no workload.
func waitingFor(pod *v1.Pod) (string, bool) {
	if pod == nil || pod.Spec.NodeName != "" {
		return "", false
	}
	workload := pod.Annotations[WorkloadAnnotation]
	if workload == "" {
		return "", false
	}
	objective := pod.Annotations[ObjectiveAnnotation]
	if objective == "" {
		objective = defaultObjective
	}
	return pairKey(workload, canonical(objective)), true
}

// pairKey is a pair's key in podPairIndex: the objective canonical, as the publisher names it.
func pairKey(workload, objective string) string { return workload + "\x00" + objective }

func asPod(obj any) *v1.Pod {
	if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = gone.Obj
	}
	pod, _ := obj.(*v1.Pod)
	return pod
}

func asNode(obj any) *v1.Node {
	if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = gone.Obj
	}
	node, _ := obj.(*v1.Node)
	return node
}

// ObservePod counts a bound pod's placement in the cache and releases a finished pod's. Only a
// trusted pod's placement counts (tiered.go): every update event judges the pod again, so one
// whose label or namespace comes or goes gains or loses its count. A pod annotated but not bound
// (only a hand-written annotation can be: the Binding sets both) is left to Reserve/Forget: its
// next scheduling cycle writes a new placement.
func (e *Engine) ObservePod(pod *v1.Pod) {
	if pod == nil {
		return
	}
	// A terminating pod still runs on its node and keeps its room until it is gone (the delete
	// event), as kube-scheduler's own cache counts it.
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		e.cache.Release(pod.UID)
		return
	}
	if pod.Spec.NodeName == "" {
		return
	}
	if !e.trusted(pod) {
		// Outside tmc's tenant namespaces, or on a pod without the tiered pod label, no
		// admission policy checked who wrote the placement: it holds nothing (and what it held
		// while its namespace was one, or the pod labelled, it holds no more).
		e.cache.Disown(pod.UID)
		return
	}
	placement, err := ParsePlacement(pod.Annotations)
	if err != nil {
		klog.ErrorS(err, "unreadable placement; the pod is not counted", "pod", klog.KObj(pod))
		return
	}
	if placement == nil {
		return
	}
	if err := e.seals.Verify(string(pod.UID), pod.Annotations); err != nil {
		// Not written by tmc's scheduler: it gains nothing. What a sealed placement of the pod
		// made it hold, it keeps until it goes: breaking a seal (which the admission policy
		// refuses on tmc's pods) must not free room the pod's containers still use on the node.
		klog.ErrorS(err, "unsealed placement; not counted", "pod", klog.KObj(pod))
		return
	}
	if placement.Node != pod.Spec.NodeName {
		klog.InfoS("placement names another node than the pod's; not counted", "pod", klog.KObj(pod),
			"placement", placement.Node, "node", pod.Spec.NodeName)
		return
	}
	e.cache.Bind(pod.UID, placement)
}

// ObserveNode records a node's rack pool and the pool's capacity, and the node's metadata as
// this object says it.
func (e *Engine) ObserveNode(node *v1.Node) {
	if node == nil {
		return
	}
	parsed := parseNode(node)
	if parsed.err != nil {
		klog.ErrorS(parsed.err, "unreadable tiered capacity", "node", klog.KObj(node))
	}
	e.cache.SetNode(node.Name, parsed.capacity)
	if node.ResourceVersion != "" {
		e.cache.Observed(node, parsed)
	}
}
