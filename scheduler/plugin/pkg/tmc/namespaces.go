package tmc

// Tenant namespaces (v1alpha1.TenantNamespaces): when the operator limits tmc to namespaces
// carrying some labels, the admission policy checks placements there only, so the engine places
// no pod elsewhere and counts no placement found elsewhere: whoever could write such a pod
// wrote its placement.

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// TenantNamespaces is the set of namespaces whose pods tmc places (v1alpha1's one rule).
type TenantNamespaces = v1alpha1.TenantNamespaces

// NewTenantNamespaces checks a selector's labels (v1alpha1.NewTenantNamespaces).
func NewTenantNamespaces(labels map[string]string) (*TenantNamespaces, error) {
	return v1alpha1.NewTenantNamespaces(labels)
}

// SetTenantNamespaces limits the engine to the namespaces the selector names. Call it before
// Watch, which then watches namespaces too (nil or an empty selector: every namespace, and no
// namespace informer).
func SetTenantNamespaces(e *Engine, tenants *TenantNamespaces) { e.tenants = tenants }

// tenant says whether a namespace is one of tmc's. A namespace the informer does not hold (not
// listed yet, or gone) is not: its pods are counted when its add event comes (watchNamespaces).
func (e *Engine) tenant(namespace string) bool {
	if e.tenants.Every() {
		return true
	}
	if e.namespaceLabels == nil {
		return false
	}
	labels, ok := e.namespaceLabels(namespace)
	return ok && e.tenants.Selects(labels)
}

// outsideTenants is the refusal of a pod that asks for tmc from another namespace: no node will
// take it there, whatever it waits for.
func (e *Engine) outsideTenants(pod *v1.Pod) *Refusal {
	return &Refusal{Message: fmt.Sprintf(
		"tmc: namespace %s is not one of tmc's tenant namespaces (labelled %s): tmc places no pod there; "+
			"an operator labels the namespace, or the pod runs elsewhere", pod.Namespace, e.tenants.String())}
}

// NamespacesSynced says whether the namespace informer has listed the namespaces (always true
// without a selector).
func (e *Engine) NamespacesSynced() bool {
	return e.namespacesSynced == nil || e.namespacesSynced()
}

// watchNamespaces feeds the engine the namespaces' labels and, when a namespace appears, changes
// its labels or goes, judges its pods again: a namespace that leaves the selector releases what
// its pods held, one that joins it has its bound pods counted as they stand.
func (e *Engine) watchNamespaces(factory informers.SharedInformerFactory, pods cache.Indexer) error {
	if e.tenants.Every() {
		return nil
	}
	informer := factory.Core().V1().Namespaces().Informer()
	lister := factory.Core().V1().Namespaces().Lister()
	e.namespaceLabels = func(name string) (map[string]string, bool) {
		ns, err := lister.Get(name)
		if err != nil {
			return nil, false
		}
		return ns.Labels, true
	}
	e.namespacesSynced = informer.HasSynced
	again := func(obj any) {
		ns := asNamespace(obj)
		if ns == nil {
			return
		}
		found, err := pods.ByIndex(cache.NamespaceIndex, ns.Name)
		if err != nil {
			return
		}
		for _, p := range found {
			e.ObservePod(asPod(p))
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: again,
		UpdateFunc: func(old, obj any) {
			if before, after := asNamespace(old), asNamespace(obj); before != nil && after != nil &&
				e.tenants.Selects(before.Labels) == e.tenants.Selects(after.Labels) {
				return
			}
			again(obj)
		},
		DeleteFunc: again,
	}); err != nil {
		return fmt.Errorf("%s: watching namespaces: %w", Name, err)
	}
	return nil
}

func asNamespace(obj any) *v1.Namespace {
	if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = gone.Obj
	}
	ns, _ := obj.(*v1.Namespace)
	return ns
}
