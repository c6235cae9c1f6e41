package tmc

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// ResourcesFitName is kube-scheduler's NodeResourcesFit as tmc-scheduler runs it in place of the
// in-tree one (the chart's profile disables NodeResourcesFit and enables this name).
const ResourcesFitName = "TmcNodeResourcesFit"

// ResourcesFit is the in-tree NodeResourcesFit, unchanged but for one thing: its PreFilter reads
// the pod's requests without the opt-in resource, which no node advertises and which its
// ignoredResources skips anyway. The in-tree Filter asks, for every node and every extended
// resource the pod requests, whether the name is an extended resource name (a fmt.Sprintf and
// two regular expressions) before it looks at ignoredResources: for an opted-in pod at 5,000
// nodes that was a ninth of tmc-scheduler's CPU, for a check whose answer is always "skip".
// Every other extension point (Filter, PreScore, Score, the queueing hints, Sign) is the
// in-tree plugin's own.
type ResourcesFit struct {
	*noderesources.Fit
}

var (
	_ fwk.PreFilterPlugin   = (*ResourcesFit)(nil)
	_ fwk.FilterPlugin      = (*ResourcesFit)(nil)
	_ fwk.PreScorePlugin    = (*ResourcesFit)(nil)
	_ fwk.ScorePlugin       = (*ResourcesFit)(nil)
	_ fwk.EnqueueExtensions = (*ResourcesFit)(nil)
	_ fwk.SignPlugin        = (*ResourcesFit)(nil)
)

// NewResourcesFit builds the in-tree NodeResourcesFit from the same arguments
// (NodeResourcesFitArgs, defaulted and validated as kube-scheduler does) and feature gates.
func NewResourcesFit(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := resourcesFitArgs(obj)
	if err != nil {
		return nil, err
	}
	// The feature gates as kube-scheduler's in-tree registry reads them (its --feature-gates).
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	inner, err := noderesources.NewFit(ctx, args, h, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ResourcesFitName, err)
	}
	fit, ok := inner.(*noderesources.Fit)
	if !ok {
		return nil, fmt.Errorf("%s: NodeResourcesFit is a %T", ResourcesFitName, inner)
	}
	return &ResourcesFit{Fit: fit}, nil
}

// resourcesFitArgs decodes the plugin's arguments as kube-scheduler decodes NodeResourcesFit's:
// the v1 type, its defaults, then the internal type (NewFit validates it).
func resourcesFitArgs(obj runtime.Object) (*config.NodeResourcesFitArgs, error) {
	var given configv1.NodeResourcesFitArgs
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &given); err != nil {
			return nil, fmt.Errorf("%s: arguments: %w", ResourcesFitName, err)
		}
	}
	scheme.Scheme.Default(&given)
	var args config.NodeResourcesFitArgs
	if err := scheme.Scheme.Convert(&given, &args, nil); err != nil {
		return nil, fmt.Errorf("%s: arguments: %w", ResourcesFitName, err)
	}
	return &args, nil
}

// Name is the plugin's name in a profile.
func (f *ResourcesFit) Name() string { return ResourcesFitName }

// PreFilter is the in-tree PreFilter on the pod without the opt-in resource.
func (f *ResourcesFit) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return f.Fit.PreFilter(ctx, state, withoutOptIn(pod), nodes)
}

// withoutOptIn is the pod (itself when it does not request the opt-in resource) with the opt-in
// resource taken out of every container's requests and limits; the pod given is not changed.
func withoutOptIn(pod *v1.Pod) *v1.Pod {
	if !requestsTiered(pod) && !limitsTiered(pod) {
		return pod
	}
	out := *pod
	out.Spec.Containers = stripOptIn(pod.Spec.Containers)
	out.Spec.InitContainers = stripOptIn(pod.Spec.InitContainers)
	if pod.Spec.Resources != nil {
		r := *pod.Spec.Resources
		r.Requests, r.Limits = withoutResource(r.Requests), withoutResource(r.Limits)
		out.Spec.Resources = &r
	}
	return &out
}

func limitsTiered(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[OptInResource]; ok {
				return true
			}
		}
	}
	return false
}

func stripOptIn(containers []v1.Container) []v1.Container {
	if containers == nil {
		return nil
	}
	out := make([]v1.Container, len(containers))
	for i, c := range containers {
		c.Resources.Requests = withoutResource(c.Resources.Requests)
		c.Resources.Limits = withoutResource(c.Resources.Limits)
		out[i] = c
	}
	return out
}

func withoutResource(list v1.ResourceList) v1.ResourceList {
	if _, ok := list[OptInResource]; !ok {
		return list
	}
	out := make(v1.ResourceList, len(list))
	for name, q := range list {
		if name != OptInResource {
			out[name] = q
		}
	}
	return out
}
