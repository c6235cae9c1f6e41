package v1alpha1

// Tiered pods. A pod's labels are the only part of it the API server can select on before it
// converts the object for CEL, so tmc's admission policies match pods by this label (the old
// object's or the new one's) and every other pod of the cluster costs them nothing. A placement
// is trusted only on a pod carrying it: on any other pod no policy checked who wrote one. The
// opt-in resource (tmc.dev/tiered) still says what the pod asks of tmc; the label says that the
// pod's tmc annotations are guarded. scheduler/conformance/tiered_pods.json holds every side
// (this package, the publisher, the chart's policies) to the same rule.
const (
	TieredPodLabel      = Group + "/tiered"
	TieredPodLabelValue = "true"
)

// TieredPodSelector is the same rule as a label selector, for the API server to apply (the
// publisher's feeder lists and watches tmc's pods with it, so another tenant's pods cost it
// nothing): held to the shared table beside IsTieredPod.
const TieredPodSelector = TieredPodLabel + "=" + TieredPodLabelValue

// IsTieredPod says whether a pod's labels make it one of tmc's: the label with exactly its value.
func IsTieredPod(labels map[string]string) bool {
	return labels[TieredPodLabel] == TieredPodLabelValue
}
