package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Tenant namespaces. The admission policy that lets only tmc's scheduler write a placement can
// be limited to the namespaces carrying the operator's labels, so that the API server spends
// nothing on other tenants' pods. A placement in any other namespace was then checked by no one:
// whoever could write the pod wrote it. Every reader of placements (the engine's accounting and
// the node's runtime plugin) asks TenantNamespaces before trusting one, with this one rule.

// MaxTenantNamespaceLabels bounds the selector: a few labels name a set of namespaces.
const MaxTenantNamespaceLabels = 16

// TenantNamespaces is the set of namespaces whose pods tmc places: those carrying every label
// of the selector. An empty selector is every namespace (the policy then matches them all).
//
// +kubebuilder:object:generate=false
type TenantNamespaces struct {
	labels map[string]string
}

// NewTenantNamespaces checks a selector's labels: Kubernetes label keys and values, at most
// MaxTenantNamespaceLabels of them.
func NewTenantNamespaces(labels map[string]string) (*TenantNamespaces, error) {
	if len(labels) > MaxTenantNamespaceLabels {
		return nil, fmt.Errorf("at most %d labels select tenant namespaces, not %d", MaxTenantNamespaceLabels, len(labels))
	}
	own := make(map[string]string, len(labels))
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a label key: %s", clip(k, 80), strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("%s: %q is not a label value: %s", k, clip(v, 80), strings.Join(errs, "; "))
		}
		own[k] = v
	}
	return &TenantNamespaces{labels: own}, nil
}

// ParseTenantNamespaceLabels reads a selector written as a flag: key=value pairs separated by
// commas ("" for every namespace).
func ParseTenantNamespaceLabels(text string) (*TenantNamespaces, error) {
	if len(text) > MaxTenantNamespaceLabels*(253+1+63+1) {
		return nil, fmt.Errorf("a selector of %d characters is longer than %d labels can be", len(text), MaxTenantNamespaceLabels)
	}
	labels := map[string]string{}
	for _, pair := range strings.Split(text, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", clip(pair, 80))
		}
		if _, twice := labels[k]; twice {
			return nil, fmt.Errorf("label %q is given twice", clip(k, 80))
		}
		labels[k] = v
	}
	return NewTenantNamespaces(labels)
}

// Every says the selector is empty: every namespace is a tenant namespace (a nil selector too).
func (t *TenantNamespaces) Every() bool { return t == nil || len(t.labels) == 0 }

// Selects says whether a namespace with these labels is a tenant namespace.
func (t *TenantNamespaces) Selects(namespaceLabels map[string]string) bool {
	if t.Every() {
		return true
	}
	for k, v := range t.labels {
		if got, ok := namespaceLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// String is the selector as the flag writes it, keys sorted ("" for every namespace).
func (t *TenantNamespaces) String() string {
	if t.Every() {
		return ""
	}
	keys := make([]string, 0, len(t.labels))
	for k := range t.labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + t.labels[k]
	}
	return strings.Join(pairs, ",")
}
