package drapublish

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"tmc.dev/scheduler-plugin/pkg/dra"
)

func recommendation(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tmc.dev/v1alpha1", "kind": "TieredRecommendation",
		"metadata": map[string]any{"name": name, "uid": "uid-" + name},
		"spec":     spec,
	}}
	return u
}

func configured(ways int, dram, slow int64) map[string]any {
	return map[string]any{
		"workload": "graph500", "objective": "cheapest",
		"llc_ways": int64(ways), "dram_bytes": dram, "slow_bytes": slow, "slow_ratio": 0.5,
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// storedTemplates is the desired templates as the API server would hold them.
func storedTemplates(ts []resourceapi.ResourceClaimTemplate) []resourceapi.ResourceClaimTemplate {
	out := make([]resourceapi.ResourceClaimTemplate, len(ts))
	for i, t := range ts {
		t = *t.DeepCopy()
		t.ResourceVersion = "9"
		t.UID = types.UID("tpl-" + t.Namespace + "-" + t.Name)
		out[i] = t
	}
	return out
}

func TestEachTenantNamespaceGetsTheRecommendationsClaimWhole(t *testing.T) {
	gone := namespace("tenant-c")
	now := metav1.NewTime(time.Unix(1, 0))
	gone.DeletionTimestamp = &now
	recs := []*unstructured.Unstructured{
		recommendation("graph500-cheapest-0123456789ab", configured(12, 5*gib, 3*gib)),
		recommendation("fallback", map[string]any{"workload": "w", "objective": "cheapest", "fallback": "no profile"}),
		recommendation("unreadable", map[string]any{"workload": "w", "objective": "slo:5%", "llc_ways": "many"}),
		recommendation("no-ways", map[string]any{"workload": "w", "objective": "slo:10%", "dram_bytes": gib}),
	}
	got, unclaimed := DesiredTemplates(recs, []*corev1.Namespace{namespace("tenant-b"), gone, namespace("tenant-a")})
	if len(got) != 2 || got[0].Namespace != "tenant-a" || got[1].Namespace != "tenant-b" {
		t.Fatalf("one template in each live tenant namespace: %+v", got)
	}
	want, err := dra.ClaimSpec([]dra.Alternative{{LLCWays: 12, DRAMBytes: 5 * gib, SlowBytes: 3 * gib}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range got {
		if tpl.Name != "graph500-cheapest-0123456789ab" || !Owned(&tpl) ||
			tpl.Annotations[WorkloadAnnotation] != "graph500" || tpl.Annotations[ObjectiveAnnotation] != "cheapest" {
			t.Fatalf("metadata: %+v", tpl.ObjectMeta)
		}
		owner := tpl.OwnerReferences
		if len(owner) != 1 || owner[0].Kind != "TieredRecommendation" || owner[0].APIVersion != "tmc.dev/v1alpha1" ||
			owner[0].UID != "uid-graph500-cheapest-0123456789ab" {
			t.Fatalf("owner: %+v", owner)
		}
		if !equality.Semantic.DeepEqual(tpl.Spec.Spec, want) {
			t.Fatalf("spec: %+v", tpl.Spec.Spec)
		}
		validClaimTemplate(t, &tpl)
	}
	reasons := map[string]error{}
	for _, u := range unclaimed {
		reasons[u.Recommendation] = u.Reason
	}
	if len(reasons) != 3 || !errors.Is(reasons["fallback"], ErrFallback) ||
		!strings.Contains(reasons["unreadable"].Error(), "cannot be read") ||
		!strings.Contains(reasons["no-ways"].Error(), "llc_ways") {
		t.Fatalf("unclaimed: %v", reasons)
	}
	if got, _ := DesiredTemplates(recs, nil); len(got) != 0 {
		t.Fatalf("no tenant namespace, no template: %+v", got)
	}
}

func alternative(ways int, dram, slow int64) map[string]any {
	return map[string]any{"llc_ways": int64(ways), "slow_ratio": float64(slow) / float64(dram+slow), "dram_bytes": dram, "slow_bytes": slow}
}

// validClaimTemplate holds a template to kube-apiserver's own validation.
func validClaimTemplate(t *testing.T, tpl *resourceapi.ResourceClaimTemplate) {
	t.Helper()
	var internal resourceinternal.ResourceClaimTemplate
	if err := legacyscheme.Scheme.Convert(tpl, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceClaimTemplate(&internal); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
}

func TestTheTemplateOffersTheAlternativesAfterTheConfigurationInOrder(t *testing.T) {
	spec := configured(12, 5*gib, 3*gib)
	spec["alternatives"] = []any{alternative(20, 5*gib, 3*gib), alternative(4, 6*gib, 2*gib), alternative(12, 4*gib, 4*gib)}
	got, unclaimed := DesiredTemplates([]*unstructured.Unstructured{recommendation("graph500", spec)}, []*corev1.Namespace{namespace("tenant-a")})
	if len(got) != 1 || len(unclaimed) != 0 {
		t.Fatalf("one template: %+v, %v", got, unclaimed)
	}
	want, err := dra.ClaimSpec([]dra.Alternative{
		{LLCWays: 12, DRAMBytes: 5 * gib, SlowBytes: 3 * gib},
		{LLCWays: 20, DRAMBytes: 5 * gib, SlowBytes: 3 * gib},
		{LLCWays: 4, DRAMBytes: 6 * gib, SlowBytes: 2 * gib},
		{LLCWays: 12, DRAMBytes: 4 * gib, SlowBytes: 4 * gib},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got[0].Spec.Spec, want) {
		t.Fatalf("spec: %+v", got[0].Spec.Spec)
	}
	validClaimTemplate(t, &got[0])
}

func TestAnAlternativeTheClaimRefusesIsLeftOutAndTheRestOffered(t *testing.T) {
	spec := configured(12, 5*gib, 3*gib)
	spec["alternatives"] = []any{
		alternative(12, 5*gib, 3*gib), // the configuration again
		alternative(8, 0, 8*gib),      // no DRAM: a pod runs in DRAM
		alternative(20, 6*gib, 2*gib),
	}
	r, claim, err := TemplateSpec(spec)
	if err != nil || len(r.Alternatives) != 3 {
		t.Fatalf("the template is kept: %v, %+v", err, r)
	}
	want, err := dra.ClaimSpec([]dra.Alternative{
		{LLCWays: 12, DRAMBytes: 5 * gib, SlowBytes: 3 * gib}, {LLCWays: 20, DRAMBytes: 6 * gib, SlowBytes: 2 * gib},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(claim, want) {
		t.Fatalf("claim: %+v", claim)
	}
	// A recommendation whose own configuration is refused gets no template, whatever its
	// alternatives: the claim's first choice is the recommendation's.
	none := configured(12, 0, 8*gib)
	none["alternatives"] = []any{alternative(20, 6*gib, 2*gib)}
	if _, _, err := TemplateSpec(none); err == nil || !strings.Contains(err.Error(), "dram_bytes") {
		t.Fatalf("refused: %v", err)
	}
}

func TestTemplatesAreCreatedLeftAloneReplacedAndDeleted(t *testing.T) {
	tenants := []*corev1.Namespace{namespace("tenant-a"), namespace("tenant-b")}
	rec := recommendation("graph500", configured(12, 5*gib, 3*gib))
	want, _ := DesiredTemplates([]*unstructured.Unstructured{rec}, tenants)
	if c := DiffTemplates(nil, want); len(c.Create) != 2 || len(c.Update)+len(c.Replace)+len(c.Delete) != 0 {
		t.Fatalf("from nothing: %+v", c)
	}
	have := storedTemplates(want)
	if c := DiffTemplates(have, want); !c.Empty() {
		t.Fatalf("unchanged: %+v", c)
	}

	// The ways change: the spec cannot be updated, so each template is replaced, by its UID.
	wider, _ := DesiredTemplates([]*unstructured.Unstructured{recommendation("graph500", configured(16, 5*gib, 3*gib))}, tenants)
	c := DiffTemplates(have, wider)
	if len(c.Replace) != 2 || len(c.Create)+len(c.Update)+len(c.Delete) != 0 {
		t.Fatalf("ways changed: %+v", c)
	}
	if c.Replace[0].Old.UID != "tpl-tenant-a-graph500" || !equality.Semantic.DeepEqual(c.Replace[0].New.Spec, wider[0].Spec) {
		t.Fatalf("replacement: %+v", c.Replace[0])
	}

	// The recommendation made again under its name, the same spec: the owner is updated in
	// place, and another's label on the template is kept.
	have[0].Labels["team"] = "graphs"
	again := rec.DeepCopy()
	again.SetUID("uid-graph500-again")
	remade, _ := DesiredTemplates([]*unstructured.Unstructured{again}, tenants)
	c = DiffTemplates(have, remade)
	if len(c.Update) != 2 || len(c.Create)+len(c.Replace)+len(c.Delete) != 0 {
		t.Fatalf("owner changed: %+v", c)
	}
	if c.Update[0].Labels["team"] != "graphs" || c.Update[0].ResourceVersion != "9" ||
		c.Update[0].OwnerReferences[0].UID != "uid-graph500-again" {
		t.Fatalf("update: %+v", c.Update[0].ObjectMeta)
	}

	// The recommendation goes (or a namespace stops being a tenant's): its templates go, by UID.
	c = DiffTemplates(have, nil)
	if len(c.Delete) != 2 || c.Delete[0] != (GoneTemplate{"tenant-a", "graph500", "tpl-tenant-a-graph500"}) {
		t.Fatalf("gone: %+v", c)
	}
}

func TestTemplatesNotThePublishersOwnAreNeverTouched(t *testing.T) {
	tenants := []*corev1.Namespace{namespace("tenant-a")}
	want, _ := DesiredTemplates([]*unstructured.Unstructured{recommendation("graph500", configured(12, 5*gib, 3*gib))}, tenants)
	mine := storedTemplates(want)
	// Someone's own template under the recommendation's name, and another of theirs.
	theirs := *mine[0].DeepCopy()
	theirs.Labels = map[string]string{ManagedByLabel: "Helm"}
	theirs.UID = "theirs"
	other := *theirs.DeepCopy()
	other.Name, other.UID = "gpu", "theirs-gpu"
	c := DiffTemplates([]resourceapi.ResourceClaimTemplate{theirs, other}, want)
	if len(c.Create) != 1 || len(c.Update)+len(c.Replace)+len(c.Delete) != 0 {
		t.Fatalf("another's templates are neither updated, replaced nor deleted: %+v", c)
	}
	if c := DiffTemplates([]resourceapi.ResourceClaimTemplate{theirs, other}, nil); !c.Empty() {
		t.Fatalf("nothing desired, nothing of theirs deleted: %+v", c)
	}
}
