package tmcnri

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Published is what the node knows of one TieredRecommendation: its uid, its spec's generation,
// and the plans of that generation and of the earlier ones its status keeps.
type Published struct {
	UID        string
	Generation int64
	Plans      map[int64]v1alpha1.GenerationPlan
}

// PublishedPlans are the published recommendations as the node knows them: a placement of
// schema tmc.placement/v3 names the one its plan is read from.
type PublishedPlans interface {
	// Synced is false until the recommendations have been listed once.
	Synced() bool
	// Object is what the node knows of the named object.
	Object(name string) (Published, bool)
}

// publishedOf reads a TieredRecommendation object: its spec's plan at its generation, and the
// status's plans of earlier generations (the publisher keeps the latest few). A part that is
// not what the API types say is left out (its plans are then not applied).
func publishedOf(u *unstructured.Unstructured) Published {
	out := Published{UID: string(u.GetUID()), Generation: u.GetGeneration(), Plans: map[int64]v1alpha1.GenerationPlan{}}
	var obj struct {
		Spec   v1alpha1.Recommendation `json:"spec"`
		Status struct {
			Plans []v1alpha1.GenerationPlan `json:"plans"`
		} `json:"status"`
	}
	raw, err := json.Marshal(u.Object)
	if err != nil || json.Unmarshal(raw, &obj) != nil {
		return out
	}
	for _, p := range obj.Status.Plans {
		out.Plans[p.Generation] = p
	}
	// The spec is the truth for its own generation, whatever the status says of it.
	out.Plans[out.Generation] = v1alpha1.GenerationPlan{Generation: out.Generation, DRAMBytes: obj.Spec.DRAMBytes, SlowBytes: obj.Spec.SlowBytes, Plan: obj.Spec.Plan}
	return out
}

// FixedPlans are the recommendations' plans as listed once (the reconcile mode lists them each
// round).
type FixedPlans map[string]Published

// Object implements PublishedPlans.
func (f FixedPlans) Object(name string) (Published, bool) {
	p, ok := f[name]
	return p, ok
}

// Synced implements PublishedPlans.
func (f FixedPlans) Synced() bool { return f != nil }

// ListPlans lists the published recommendations' plans.
func ListPlans(ctx context.Context, client dynamic.Interface) (FixedPlans, error) {
	list, err := client.Resource(v1alpha1.Resource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := FixedPlans{}
	for i := range list.Items {
		out[list.Items[i].GetName()] = publishedOf(&list.Items[i])
	}
	return out, nil
}

// InformedPlans are the recommendations' plans as an informer holds them, parsed once per
// event: the plugin reads them at each placed container, which must not wait on the API server.
type InformedPlans struct {
	// synced is the handler's own: the informer's first list delivered to it, so that the map
	// holds every object listed (the informer's HasSynced may come first).
	synced func() bool
	mu     sync.RWMutex
	plans  map[string]Published
}

// WatchPlans starts an informer of the published recommendations, stopped with stop.
func WatchPlans(client dynamic.Interface, stop <-chan struct{}) (*InformedPlans, error) {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	informer := factory.ForResource(v1alpha1.Resource).Informer()
	w := &InformedPlans{plans: map[string]Published{}}
	set := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		p := publishedOf(u)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.plans[u.GetName()] = p
	}
	registration, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				w.mu.Lock()
				defer w.mu.Unlock()
				delete(w.plans, u.GetName())
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", v1alpha1.Resource.Resource, err)
	}
	w.synced = registration.HasSynced
	factory.Start(stop)
	return w, nil
}

// Object implements PublishedPlans.
func (w *InformedPlans) Object(name string) (Published, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	p, ok := w.plans[name]
	return p, ok
}

// Synced implements PublishedPlans.
func (w *InformedPlans) Synced() bool { return w.synced != nil && w.synced() }

// PlanNotYet: a placement names a published plan and the node has not listed the
// recommendations yet; nothing is applied on a guess (the kubelet creates the container again).
const PlanNotYet = "the node has not listed tmc's published recommendations yet"

// PlanWait bounds how long a pod waits for the node to see the generation its placement names:
// the node's watch lags the scheduler's by moments, so a pod still waiting past it names an
// object the node will not see (deleted before the node's watch caught up, or a watch that
// stopped), and it runs without the per-structure plan rather than never.
const PlanWait = 2 * time.Minute

// ResolvePlan is the placement with its plan in it: a placement that names the published
// recommendation its plan is in (tmc.placement/v3) gets that object's plan sized to its
// configuration (v1alpha1.SizePlan, as the scheduler sized it), at the generation it was placed
// from. A nil placement means not yet, with the reason: the recommendations are not listed yet
// (PlanNotYet), or the node has not seen the object, or not at the generation named, since the
// node's watch may lag the scheduler's. waitedOut (the pod has waited PlanWait) makes "not yet"
// final: the plan is then unavailable, as when the node reads no recommendations, the object
// the node sees is another one (its uid differs: made again under the same name), it has moved
// past the generation named and keeps that generation's plan no more, or its plan does not fit
// the configuration. unavailable says why; the pod then runs without a per-structure plan,
// every structure in DRAM up to the pod's DRAM and the rest slow, within what it was given.
func ResolvePlan(pl *Placement, plans PublishedPlans, waitedOut bool) (resolved *Placement, unavailable string) {
	if pl.PlanFrom == nil {
		return pl, ""
	}
	from := *pl.PlanFrom
	out := *pl
	out.Schema, out.PlanFrom, out.Plan = v1alpha1.PlacementSchema, nil, nil
	if plans == nil {
		return &out, "the node reads no published recommendations (no API server): the per-structure plan of " + from.Recommendation + " is not applied"
	}
	notYet := func(why string) (*Placement, string) {
		if !waitedOut {
			return nil, why
		}
		return &out, fmt.Sprintf("%s after %s of waiting: the per-structure plan of %s is not applied", why, PlanWait, from.Recommendation)
	}
	if !plans.Synced() {
		return notYet(PlanNotYet)
	}
	object, ok := plans.Object(from.Recommendation)
	if !ok {
		return notYet(fmt.Sprintf("the node does not see TieredRecommendation %s yet", from.Recommendation))
	}
	if from.UID != nil && *from.UID != object.UID {
		return &out, fmt.Sprintf("TieredRecommendation %s is another object than the pod was placed from (uid %s, placed from %s): its per-structure plan is not applied",
			from.Recommendation, object.UID, *from.UID)
	}
	published, ok := object.Plans[from.Generation]
	if !ok && object.Generation < from.Generation {
		return notYet(fmt.Sprintf("the node sees TieredRecommendation %s at generation %d, not yet at %d, which the pod was placed from",
			from.Recommendation, object.Generation, from.Generation))
	}
	if !ok {
		return &out, fmt.Sprintf("TieredRecommendation %s is at generation %d and no longer keeps the plan of generation %d, which the pod was placed from: its per-structure plan is not applied",
			from.Recommendation, object.Generation, from.Generation)
	}
	c := out.Configuration
	out.Plan = v1alpha1.SizePlan(published.Plan, published.DRAMBytes, published.SlowBytes, c.DRAMBytes, c.SlowBytes)
	if err := out.Validate(); err != nil {
		out.Plan = nil
		return &out, fmt.Sprintf("the plan of TieredRecommendation %s does not fit the placement: %v", from.Recommendation, err)
	}
	return &out, ""
}

// KeptPlanSuffix names the file, beside a pod's plan in the node's plan directory
// (<uid>.plan-from.json), where the node keeps the plan it resolved the pod's placement to the
// first time: every later container of the pod (one restarted, or created after a long init
// container), each reconcile round and the plugin after a restart read it there rather than
// the object again, which may have moved past keeping that generation since. Removed with the
// pod's other files.
const KeptPlanSuffix = ".plan-from.json"

// keptPlan is a pod's plan as the node resolved it: the sized plan of the source its placement
// names, or, with no plan, why it has none.
type keptPlan struct {
	From        v1alpha1.PlanSource      `json:"plan_from"`
	Plan        []v1alpha1.StructurePlan `json:"plan"`
	Unavailable string                   `json:"unavailable,omitempty"`
}

func keptPlanPath(dir, uid string) (string, bool) {
	if dir == "" || !uidText.MatchString(uid) {
		return "", false
	}
	return filepath.Join(dir, uid+KeptPlanSuffix), true
}

func sameSource(a, b v1alpha1.PlanSource) bool {
	return a.Recommendation == b.Recommendation && a.Generation == b.Generation &&
		(a.UID == nil) == (b.UID == nil) && (a.UID == nil || *a.UID == *b.UID)
}

// ResolvePodPlan is ResolvePlan once per pod: the first final answer for the pod uid (its plan,
// or why it has none) is kept in dir, and read back for every later call, whatever the object
// says by then. A kept answer that is unreadable, for another source, or no longer valid for
// the placement is resolved again. "Not yet" is never kept. dir "" keeps nothing.
func ResolvePodPlan(dir, uid string, pl *Placement, plans PublishedPlans, waitedOut bool) (resolved *Placement, unavailable string) {
	if pl.PlanFrom == nil {
		return pl, ""
	}
	path, keep := keptPlanPath(dir, uid)
	if keep {
		if data, err := os.ReadFile(path); err == nil {
			var kept keptPlan
			if json.Unmarshal(data, &kept) == nil && sameSource(kept.From, *pl.PlanFrom) {
				out := *pl
				out.Schema, out.PlanFrom, out.Plan = v1alpha1.PlacementSchema, nil, kept.Plan
				if out.Validate() == nil {
					return &out, kept.Unavailable
				}
			}
		}
	}
	resolved, unavailable = ResolvePlan(pl, plans, waitedOut)
	if resolved != nil && keep {
		// A failed write only loses the keeping: this container gets the plan resolved now, and
		// the pod's plan file, written to the same directory, reports the failure if the
		// directory is at fault.
		if data, err := json.Marshal(keptPlan{From: *pl.PlanFrom, Plan: resolved.Plan, Unavailable: unavailable}); err == nil {
			_ = writeAtomic(path, string(data)+"\n")
		}
	}
	return resolved, unavailable
}
