package tmc

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// RecommendationResource is the custom resource the recommendation publisher writes
// (model.node_contract: RECOMMENDATION_KIND, cluster-scoped, one object per workload and
// objective, its spec a Recommendation). The plugin reads it from an informer, so that placing a
// pod needs no call to the service and keeps working while the service or its database is down.
var RecommendationResource = v1alpha1.Resource

// Published looks up a published recommendation's spec (JSON) by workload and objective, and
// with it the object it was read from (name, generation and uid), which a placement names so that
// the node reads the plan there rather than from the pod.
type Published interface {
	Lookup(workload, objective string) ([]byte, bool)
	LookupFrom(workload, objective string) ([]byte, v1alpha1.PlanSource, bool)
}

type recommendationKey struct{ workload, objective string }

type publishedSpec struct {
	spec       []byte
	generation int64
	uid        string
}

// RecommendationIndex holds the published recommendations by (workload, objective), fed by an
// informer's events. The spec is kept as JSON and read per pod with the annotation's own parser:
// one set of rules for both sources.
type RecommendationIndex struct {
	// published, when set, is told each pair whose object the informer's handler recorded.
	published func(workload, objective string)
	mu        sync.RWMutex
	byKey     map[recommendationKey]publishedSpec
	byName    map[string]recommendationKey
	names     map[recommendationKey]string
	// namePlans: placements name the published plan (tmc.placement/v3) rather than carry it.
	// Off until the operator turns it on (NamePlans), once every node's tmc-nri reads v3.
	namePlans bool
}

// NamePlans makes LookupFrom name the objects (so placements name their plans, v3) or not
// (placements carry them, v2). Set before the informer starts.
func (x *RecommendationIndex) NamePlans(on bool) { x.namePlans = on }

// NewRecommendationIndex returns an empty index.
func NewRecommendationIndex() *RecommendationIndex {
	return &RecommendationIndex{byKey: map[recommendationKey]publishedSpec{}, byName: map[string]recommendationKey{}, names: map[recommendationKey]string{}}
}

// Lookup implements Published.
func (x *RecommendationIndex) Lookup(workload, objective string) ([]byte, bool) {
	spec, _, ok := x.LookupFrom(workload, objective)
	return spec, ok
}

// LookupFrom implements Published: the spec, and the object's name, generation and uid (zero
// when placements do not name plans, NamePlans, or the object came without a generation; no uid
// when it came without one).
func (x *RecommendationIndex) LookupFrom(workload, objective string) ([]byte, v1alpha1.PlanSource, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	key := recommendationKey{workload, objective}
	found, ok := x.byKey[key]
	if !ok {
		return nil, v1alpha1.PlanSource{}, false
	}
	if !x.namePlans {
		return found.spec, v1alpha1.PlanSource{}, true
	}
	from := v1alpha1.PlanSource{Recommendation: x.names[key], Generation: found.generation}
	if found.uid != "" {
		uid := found.uid
		from.UID = &uid
	}
	return found.spec, from, true
}

// Len is the number of recommendations held.
func (x *RecommendationIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey)
}

// Set records an object's spec under its workload and objective. An object without them cannot
// be looked up and is ignored (the API server's schema requires both).
func (x *RecommendationIndex) Set(name string, spec map[string]any) {
	x.SetAt(name, 0, spec)
}

// SetAt records an object's spec at its metadata.generation.
func (x *RecommendationIndex) SetAt(name string, generation int64, spec map[string]any) {
	x.SetObject(name, "", generation, spec)
}

// SetObject records an object's spec at its metadata.generation, with its metadata.uid: a
// placement names both, since an object made again under the same name counts its generations
// from 1 again.
func (x *RecommendationIndex) SetObject(name, uid string, generation int64, spec map[string]any) {
	workload, _ := spec["workload"].(string)
	objective, _ := spec["objective"].(string)
	raw, err := json.Marshal(spec)
	if workload == "" || objective == "" || err != nil {
		klog.InfoS("published recommendation without workload or objective; ignored", "name", name)
		x.Delete(name)
		return
	}
	key := recommendationKey{workload, objective}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byName[name]; ok && old != key {
		delete(x.byKey, old)
		delete(x.names, old)
	}
	x.byName[name] = key
	x.names[key] = name
	x.byKey[key] = publishedSpec{raw, generation, uid}
}

// Delete forgets an object.
func (x *RecommendationIndex) Delete(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if key, ok := x.byName[name]; ok {
		delete(x.byKey, key)
		delete(x.byName, name)
		delete(x.names, key)
	}
}

// OnPublished makes the index's informer handler tell published the pair (workload, objective)
// of each object it records, after recording it: set before the informer starts.
func (x *RecommendationIndex) OnPublished(published func(workload, objective string)) {
	x.published = published
}

// Handler is the informer event handler that keeps the index.
func (x *RecommendationIndex) Handler() cache.ResourceEventHandler {
	set := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			spec, _, _ := unstructured.NestedMap(u.Object, "spec")
			x.SetObject(u.GetName(), string(u.GetUID()), u.GetGeneration(), spec)
			workload, _ := spec["workload"].(string)
			objective, _ := spec["objective"].(string)
			if x.published != nil && workload != "" && objective != "" {
				x.published(workload, objective)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				x.Delete(u.GetName())
			}
		},
	}
}

// recommendationSyncTimeout bounds the wait for the first list of published recommendations at
// start: a cluster without the custom resource definition still schedules (every pod gets the
// fallback, as it would without a recommendation).
const recommendationSyncTimeout = 30 * time.Second

// WatchRecommendations starts an informer on the published recommendations and waits, bounded,
// for its first list, so that the scheduler's first pods find what is already published.
func WatchRecommendations(ctx context.Context, client dynamic.Interface, namePlans bool) (*RecommendationIndex, error) {
	index := NewRecommendationIndex()
	index.NamePlans(namePlans)
	return index, WatchRecommendationsInto(ctx, client, index)
}

// WatchRecommendationsInto is WatchRecommendations into an index made by the caller (with its
// OnPublished set).
func WatchRecommendationsInto(ctx context.Context, client dynamic.Interface, index *RecommendationIndex) error {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	informer := factory.ForResource(RecommendationResource).Informer()
	if _, err := informer.AddEventHandler(index.Handler()); err != nil {
		return fmt.Errorf("%s: watching %s: %w", Name, RecommendationResource.Resource, err)
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, recommendationSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		klog.ErrorS(nil, "published recommendations not listed in time; pods get the fallback until they are",
			"resource", RecommendationResource.String(), "timeout", recommendationSyncTimeout)
	} else {
		klog.InfoS("published recommendations listed", "count", index.Len())
	}
	return nil
}
