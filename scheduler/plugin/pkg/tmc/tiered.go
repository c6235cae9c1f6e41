package tmc

// Which pods' placements the engine trusts: those tmc's admission policies guard. The policies
// judge a pod only in a tenant namespace (namespaces.go) and only when it carries the tiered pod
// label (v1alpha1.TieredPodLabel, on the old object or the new one); anywhere else whoever could
// write the pod could write its placement. So the engine places only such pods and counts only
// their placements: one rule, asked by Ask and by ObservePod.

import (
	v1 "k8s.io/api/core/v1"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// trusted says whether the pod's placement annotations are guarded: a labelled pod of a tenant
// namespace.
func (e *Engine) trusted(pod *v1.Pod) bool {
	return v1alpha1.IsTieredPod(pod.Labels) && e.tenant(pod.Namespace)
}

// untrusted is the refusal of an opted-in pod whose placement no policy would guard (nil for a
// trusted one): outside the tenant namespaces, or without the label.
func (e *Engine) untrusted(pod *v1.Pod) *Refusal {
	if !e.tenant(pod.Namespace) {
		return e.outsideTenants(pod)
	}
	if !v1alpha1.IsTieredPod(pod.Labels) {
		return &Refusal{Message: UnlabelledMessage}
	}
	return nil
}

// UnlabelledMessage is the refusal of a pod that requests tmc's resource without the label:
// no node will take it until the pod (or the template it is made from) carries the label.
const UnlabelledMessage = "tmc: the pod requests " + string(OptInResource) + " but is not labelled " +
	v1alpha1.TieredPodLabel + "=" + v1alpha1.TieredPodLabelValue + ": tmc places only labelled pods " +
	"(the label is what its admission policy guards); label the pod or its template"
