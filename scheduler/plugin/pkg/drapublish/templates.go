package drapublish

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

// The label that marks a ResourceClaimTemplate as the publisher's own: only templates carrying
// it are ever listed, updated or deleted, so that a template of the same name made by anyone
// else is left alone.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "tmc-dra-publisher"
)

// The annotations a template carries to say which (workload, objective) it is for: the pods'
// own tmc.dev/workload and tmc.dev/objective.
const (
	WorkloadAnnotation  = v1alpha1.Group + "/workload"
	ObjectiveAnnotation = v1alpha1.Group + "/objective"
)

// ErrFallback: a recommendation that is a fallback has no configuration to claim.
var ErrFallback = errors.New("the recommendation is a fallback: there is no configuration to claim")

// Unclaimed is a published recommendation that gets no template, and why.
type Unclaimed struct {
	Recommendation string
	Reason         error
}

// TemplateSpec is the claim a recommendation's template makes for each pod: dra.ClaimSpec of the
// configuration its spec names (llc_ways, dram_bytes, slow_bytes), then its alternatives in the
// spec's order (Algorithm 1's, lowest packing penalty first), each taken whole, the first that
// fits a node. A fallback, a spec that cannot be read or whose own configuration ClaimSpec
// refuses makes none. An alternative ClaimSpec refuses (one that repeats another, one without
// DRAM) is left out and logged: the claim still offers the rest.
func TemplateSpec(spec map[string]any) (v1alpha1.Recommendation, resourceapi.ResourceClaimSpec, error) {
	var r v1alpha1.Recommendation
	raw, err := json.Marshal(spec)
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	if err != nil {
		return r, resourceapi.ResourceClaimSpec{}, fmt.Errorf("the spec cannot be read: %w", err)
	}
	if r.Fallback != nil {
		return r, resourceapi.ResourceClaimSpec{}, ErrFallback
	}
	if r.Workload == nil || r.Objective == nil {
		return r, resourceapi.ResourceClaimSpec{}, errors.New("the spec names no workload or objective")
	}
	offered := []dra.Alternative{{LLCWays: r.LLCWays, DRAMBytes: r.DRAMBytes, SlowBytes: r.SlowBytes}}
	claim, err := dra.ClaimSpec(offered)
	if err != nil {
		return r, claim, err
	}
	for i, a := range r.Alternatives {
		if len(offered) == dra.MaxAlternatives {
			// The API's bound is three; a claim holds four configurations in all.
			klog.InfoS("alternative left out of the recommendation's ResourceClaimTemplate: a claim offers at most four configurations",
				"workload", *r.Workload, "objective", *r.Objective, "alternative", i)
			break
		}
		next := append(offered[:len(offered):len(offered)], dra.Alternative{LLCWays: a.LLCWays, DRAMBytes: a.DRAMBytes, SlowBytes: a.SlowBytes})
		wider, err := dra.ClaimSpec(next)
		if err != nil {
			klog.InfoS("alternative left out of the recommendation's ResourceClaimTemplate",
				"workload", *r.Workload, "objective", *r.Objective, "alternative", i, "reason", err.Error())
			continue
		}
		offered, claim = next, wider
	}
	return r, claim, nil
}

// DesiredTemplates is every ResourceClaimTemplate the publisher keeps: in each namespace given
// (the tenant namespaces, chosen by the caller; a terminating one gets none, it accepts no new
// object), one per published recommendation that has a configuration, named as the
// recommendation (a pod names it in resourceClaimTemplateName), its spec TemplateSpec's, labelled
// as the publisher's, annotated with the pair, and owned by the recommendation (so that the
// garbage collector removes it with the recommendation even while the publisher is down). The
// recommendations that get none are returned with the reason.
func DesiredTemplates(recommendations []*unstructured.Unstructured, namespaces []*corev1.Namespace) ([]resourceapi.ResourceClaimTemplate, []Unclaimed) {
	recs := append([]*unstructured.Unstructured(nil), recommendations...)
	sort.Slice(recs, func(i, j int) bool { return recs[i].GetName() < recs[j].GetName() })
	var names []string
	for _, ns := range namespaces {
		if ns.DeletionTimestamp == nil && ns.Status.Phase != corev1.NamespaceTerminating {
			names = append(names, ns.Name)
		}
	}
	sort.Strings(names)
	var out []resourceapi.ResourceClaimTemplate
	var unclaimed []Unclaimed
	for _, u := range recs {
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		r, claim, err := TemplateSpec(spec)
		if err != nil {
			unclaimed = append(unclaimed, Unclaimed{Recommendation: u.GetName(), Reason: err})
			continue
		}
		for _, ns := range names {
			out = append(out, resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{
					Name:      u.GetName(),
					Namespace: ns,
					Labels:    map[string]string{ManagedByLabel: ManagedBy},
					Annotations: map[string]string{
						WorkloadAnnotation: *r.Workload, ObjectiveAnnotation: *r.Objective,
					},
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.RecommendationKind,
						Name: u.GetName(), UID: u.GetUID(),
					}},
				},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: *claim.DeepCopy()},
			})
		}
	}
	return out, unclaimed
}

// TemplateChanges turns the stored templates into the desired ones. A template's spec cannot
// be changed (kube-apiserver refuses it), so one whose spec differs is replaced: deleted by UID,
// then created. One whose spec is right but whose labels, annotations or owners are not is
// updated in place.
type TemplateChanges struct {
	Create  []resourceapi.ResourceClaimTemplate
	Update  []resourceapi.ResourceClaimTemplate
	Replace []Replaced
	Delete  []GoneTemplate
}

// Replaced is a stored template to delete and the desired one to create in its place.
type Replaced struct {
	Old GoneTemplate
	New resourceapi.ResourceClaimTemplate
}

// GoneTemplate is a stored template to delete, by namespace, name and UID.
type GoneTemplate struct {
	Namespace, Name string
	UID             types.UID
}

// Empty says there is nothing to do.
func (c TemplateChanges) Empty() bool {
	return len(c.Create)+len(c.Update)+len(c.Replace)+len(c.Delete) == 0
}

// Owned says a stored template is the publisher's own.
func Owned(t *resourceapi.ResourceClaimTemplate) bool {
	return t.Labels[ManagedByLabel] == ManagedBy
}

// DiffTemplates compares stored and desired templates by namespace and name. Stored templates
// that are not the publisher's own (Owned) are never in the result, whatever their name: a
// desired one whose name another template holds is created, and the API server refuses it.
func DiffTemplates(stored, desired []resourceapi.ResourceClaimTemplate) TemplateChanges {
	key := func(t *resourceapi.ResourceClaimTemplate) string { return t.Namespace + "/" + t.Name }
	have := map[string]resourceapi.ResourceClaimTemplate{}
	for i := range stored {
		if Owned(&stored[i]) {
			have[key(&stored[i])] = stored[i]
		}
	}
	var out TemplateChanges
	for i := range desired {
		d := *desired[i].DeepCopy()
		k := key(&d)
		s, ok := have[k]
		delete(have, k)
		switch {
		case !ok:
			out.Create = append(out.Create, d)
		case !equality.Semantic.DeepEqual(s.Spec, d.Spec):
			out.Replace = append(out.Replace, Replaced{Old: GoneTemplate{s.Namespace, s.Name, s.UID}, New: d})
		case !sameMeta(&s, &d):
			u := *s.DeepCopy()
			if u.Labels == nil {
				u.Labels = map[string]string{}
			}
			if u.Annotations == nil {
				u.Annotations = map[string]string{}
			}
			for k, v := range d.Labels {
				u.Labels[k] = v
			}
			for k, v := range d.Annotations {
				u.Annotations[k] = v
			}
			u.OwnerReferences = d.OwnerReferences
			out.Update = append(out.Update, u)
		}
	}
	for _, s := range have {
		out.Delete = append(out.Delete, GoneTemplate{s.Namespace, s.Name, s.UID})
	}
	sort.Slice(out.Delete, func(i, j int) bool {
		a, b := out.Delete[i], out.Delete[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	return out
}

// sameMeta says the stored template carries the desired labels, annotations and owners (others'
// labels and annotations beside them are kept).
func sameMeta(stored, desired *resourceapi.ResourceClaimTemplate) bool {
	for k, v := range desired.Labels {
		if got, ok := stored.Labels[k]; !ok || got != v {
			return false
		}
	}
	for k, v := range desired.Annotations {
		if got, ok := stored.Annotations[k]; !ok || got != v {
			return false
		}
	}
	return sameOwners(stored.OwnerReferences, desired.OwnerReferences)
}
