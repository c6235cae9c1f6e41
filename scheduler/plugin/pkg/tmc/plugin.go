package tmc

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile.
const Name = "TmcPlacement"

const stateKey fwk.StateKey = Name

// TmcPlacement places opted-in pods on tiered-memory nodes: it keeps the nodes that can hold the
// pod's configuration (DRAM, node-local or pooled slow memory, a contiguous run of LLC ways),
// ranks them with the engine's packing score (score.go, the one both front doors rank by),
// reserves the configuration in its cache and binds the pod with the placement annotation, which
// the node's tmc-nri applies. Pods that do not request
// tmc.dev/tiered are skipped at every extension point.
type TmcPlacement struct {
	*Engine
	// node returns a node of the scheduling cycle's snapshot (Reserve needs its capacity).
	node func(name string) (*v1.Node, error)
	// cycle is the scheduling cycle PreFilter last began: Filter and Score, called for every
	// node judged, find the pod's ask here instead of in the cycle state's map (a hash of the
	// key and a lookup per node). kube-scheduler's scheduling cycle is serial; a state or pod
	// that is not this one (a preemption's copy of the state) is read from the state as before.
	cycle atomic.Pointer[cycleOf]
	// room holds the pods PreEnqueue keeps waiting for their recommendation (nil: none kept).
	room *waitRoom
}

// cycleOf is one scheduling cycle's state object, pod and what PreFilter wrote into the state.
type cycleOf struct {
	state fwk.CycleState
	pod   types.UID
	data  *cycleState
}

// readCycle is readState for the cycle PreFilter last began, without the state's map.
func (p *TmcPlacement) readCycle(state fwk.CycleState, pod *v1.Pod) (*cycleState, error) {
	if c := p.cycle.Load(); c != nil && c.state == state && pod != nil && c.pod == pod.UID {
		return c.data, nil
	}
	return readState(state)
}

// Args are the plugin's arguments in the KubeSchedulerConfiguration (pluginConfig).
type Args struct {
	// RecommendationWaitSeconds is what a pod of a workload with no published recommendation
	// does: -1 (the default) waits for its pair's object however long it takes, and moves when
	// the object appears; 0 is placed at once with the fallback; 1..300 waits that long from
	// its creation (retried with the scheduler's backoff), then is placed with the fallback.
	RecommendationWaitSeconds *int64 `json:"recommendationWaitSeconds,omitempty"`
	// RackPools are the rack pools' sizes (Kubernetes quantities, "256Gi"), set by the
	// operator: a pool named here has this size whatever its nodes publish.
	RackPools map[string]string `json:"rackPools,omitempty"`
	// PlacementLease, when set, is the lease a replica must hold to bind (FenceArgs). Set it
	// wherever replicas elect a leader.
	PlacementLease *FenceArgs `json:"placementLease,omitempty"`
	// RequiredNodePlugin, when set, is the NRI plugin a placed pod's containers require on
	// the node (RequireNodePlugin): "tmc" where nodes run tmc-nri.
	RequiredNodePlugin string `json:"requiredNodePlugin,omitempty"`
	// TenantNamespaceLabels, when set, are the labels of the namespaces tmc places pods in (the
	// admission policy's namespaceSelector): a pod opted in elsewhere is refused, and a bound
	// pod's placement elsewhere is not counted. Empty: every namespace.
	TenantNamespaceLabels map[string]string `json:"tenantNamespaceLabels,omitempty"`
	// PlanByReference makes a pod placed from a published recommendation name the plan
	// (tmc.placement/v3: the object and its generation) instead of carrying it, so that its
	// later events are smaller. Turn it on only once every node runs a tmc-nri that reads v3:
	// an older one applies no configuration to such a pod, and an older scheduler replica
	// does not count it.
	PlanByReference bool `json:"planByReference,omitempty"`
	// PlacementSealKeys, when set, is the directory of the keys that seal placements (a mounted
	// Secret, one file per key named by its id): every placement the plugin writes is sealed with
	// PlacementSealSigningKey, and a bound pod's placement counts only when its seal verifies
	// with one of the keys. Empty: sealing off (a Binding's placement is then trusted as it is).
	PlacementSealKeys       string `json:"placementSealKeys,omitempty"`
	PlacementSealSigningKey string `json:"placementSealSigningKey,omitempty"`
	// PlacementSealAcceptUnsealed also counts a placement with no seal at all (one with a seal is
	// verified): for the upgrade from a release that did not seal, while its pods run.
	PlacementSealAcceptUnsealed bool `json:"placementSealAcceptUnsealed,omitempty"`
}

// DefaultRecommendationWait is the wait when the configuration does not set one: until the
// pair's object is published (never the fallback for a pair merely not published yet).
const DefaultRecommendationWait = WaitUntilPublished

// ParseArgs decodes and bounds the plugin's arguments: the recommendation wait and the rack
// pools' sizes. Every error names the argument; nothing here panics.
func ParseArgs(obj runtime.Object) (time.Duration, map[string]int64, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return 0, nil, err
	}
	return args.parsed()
}

func decodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return Args{}, fmt.Errorf("%s: arguments: %w", Name, err)
		}
	}
	return args, nil
}

// parsed is the arguments' recommendation wait and rack pools, checked against their bounds.
func (args *Args) parsed() (time.Duration, map[string]int64, error) {
	pools, err := ParseRackPools(args.RackPools)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: rackPools: %w", Name, err)
	}
	if args.RecommendationWaitSeconds == nil {
		return DefaultRecommendationWait, pools, nil
	}
	switch s := *args.RecommendationWaitSeconds; {
	case s == -1:
		return WaitUntilPublished, pools, nil
	case s < 0 || s > 300:
		return 0, nil, fmt.Errorf("%s: recommendationWaitSeconds must be -1 (until published) or in 0..300, not %d", Name, s)
	default:
		return time.Duration(s) * time.Second, pools, nil
	}
}

// ParseRackPools reads rack pools' sizes: names as a node's tmc.dev/slow-pool, sizes as
// Kubernetes quantities within the contract's bytes.
func ParseRackPools(given map[string]string) (map[string]int64, error) {
	pools := map[string]int64{}
	for name, text := range given {
		if len(name) > 253 || !dnsName.MatchString(name) {
			return nil, fmt.Errorf("%q is not a DNS subdomain name", clip(name, 40))
		}
		q, err := resource.ParseQuantity(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a quantity", name, clip(text, 40))
		}
		v, ok := q.AsInt64()
		if !ok || v < 0 || v >= MaxBytes {
			return nil, fmt.Errorf("%s: %s must be whole bytes in 0..2^52", name, clip(text, 40))
		}
		pools[name] = v
	}
	return pools, nil
}

var (
	_ fwk.PreEnqueuePlugin = (*TmcPlacement)(nil)
	_ fwk.PreFilterPlugin  = (*TmcPlacement)(nil)
	_ fwk.FilterPlugin     = (*TmcPlacement)(nil)
	_ fwk.PreScorePlugin   = (*TmcPlacement)(nil)
	_ fwk.ScorePlugin      = (*TmcPlacement)(nil)
	_ fwk.ReservePlugin    = (*TmcPlacement)(nil)
	_ fwk.BindPlugin       = (*TmcPlacement)(nil)
	_ fwk.SignPlugin       = (*TmcPlacement)(nil)

	_ fwk.EnqueueExtensions = (*TmcPlacement)(nil)
)

// New builds the plugin and feeds its cache from the scheduler's informers: bound pods'
// placements (so that a restarted scheduler starts from what the API server holds; kube-scheduler
// waits for these informers to sync before it schedules) and nodes' rack pools.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	wait, pools, err := args.parsed()
	if err != nil {
		return nil, err
	}
	fence, err := NewFence(ctx, h.ClientSet(), args.PlacementLease)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if err := registerPlacementMetrics(); err != nil {
		return nil, err
	}
	// The engine binds through a client whose transport checks the placement lease as each
	// Binding leaves (Fence.BindingTransport): after the client's rate limiter, not only
	// before the call. Without a kubeconfig (tests), the handle's client as it is.
	binder := h.ClientSet()
	if fence != nil && h.KubeConfig() != nil {
		cfg := rest.CopyConfig(h.KubeConfig())
		cfg.Wrap(fence.BindingTransport)
		if binder, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("%s: a client for the Binding: %w", Name, err)
		}
	}
	p := &TmcPlacement{
		Engine: NewEngine(binder, nil, wait),
		node: func(name string) (*v1.Node, error) {
			info, err := h.SnapshotSharedLister().NodeInfos().Get(name)
			if err != nil {
				return nil, err
			}
			return info.Node(), nil
		},
	}
	SetRackPools(p.Engine, pools)
	SetFence(p.Engine, fence)
	SetRecorder(p.Engine, h.EventRecorder())
	if err := RequireNodePlugin(p.Engine, args.RequiredNodePlugin); err != nil {
		return nil, fmt.Errorf("%s: requiredNodePlugin: %w", Name, err)
	}
	tenants, err := NewTenantNamespaces(args.TenantNamespaceLabels)
	if err != nil {
		return nil, fmt.Errorf("%s: tenantNamespaceLabels: %w", Name, err)
	}
	SetTenantNamespaces(p.Engine, tenants)
	seals, err := LoadSealKeys(args.PlacementSealKeys, args.PlacementSealSigningKey)
	if err != nil {
		return nil, fmt.Errorf("%s: placementSealKeys: %w", Name, err)
	}
	seals.AcceptUnsealed(args.PlacementSealAcceptUnsealed)
	SetSealKeys(p.Engine, seals)
	if err := p.Watch(h.SharedInformerFactory()); err != nil {
		return nil, err
	}
	p.room = newWaitRoom(h, h.EventRecorder())
	if _, err := h.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(p.room.handler()); err != nil {
		return nil, fmt.Errorf("%s: watching pods: %w", Name, err)
	}
	if h.KubeConfig() != nil {
		client, err := dynamic.NewForConfig(h.KubeConfig())
		if err != nil {
			return nil, fmt.Errorf("%s: a client for %s: %w", Name, RecommendationResource.Resource, err)
		}
		index := NewRecommendationIndex()
		index.NamePlans(args.PlanByReference)
		index.OnPublished(func(workload, objective string) { p.activateWaiting(h, workload, objective) })
		if err := WatchRecommendationsInto(ctx, client, index); err != nil {
			return nil, err
		}
		p.published = index
	}
	return p, nil
}

// Name is the plugin's name.
func (p *TmcPlacement) Name() string { return Name }

type cycleState struct {
	ask *PodAsk
	// held is what Reserve assumed, for Bind.
	held *Reservation
}

func (s *cycleState) Clone() fwk.StateData {
	// PreFilter's extensions never change it; Reserve writes held once, in the one cycle.
	return s
}

func readState(state fwk.CycleState) (*cycleState, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, err
	}
	s, ok := data.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("%s: cycle state of type %T", Name, data)
	}
	return s, nil
}

// SignPod refuses to sign a tiered pod: two such pods with the same spec do not fit the same
// nodes, because each one's reservation changes the cache that the next one is judged against.
// Other pods are signed, since the plugin skips them.
func (p *TmcPlacement) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if requestsTiered(pod) {
		return nil, fwk.NewStatus(fwk.Unschedulable, "a tiered pod's fit depends on the reservations before it")
	}
	return nil, nil
}

func requestsTiered(pod *v1.Pod) bool {
	q := podRequest(pod, OptInResource)
	return q.Sign() > 0
}

// PreFilter reads the pod's ask once per cycle; other pods skip the plugin.
func (p *TmcPlacement) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	ask, refused := p.Ask(pod)
	if refused != nil {
		// A pod waiting for its recommendation waits in PreEnqueue and is not attempted; it
		// comes here only if its pair's object went between the queue and the cycle.
		if refused.UntilPublished {
			// Unschedulable, not an error: the pod sits in the unschedulable queue until its
			// pair's object is added or updated (RecommendationHint), not on error backoff.
			// No preemption can help it.
			return nil, newStatus(fwk.UnschedulableAndUnresolvable, refused.Message)
		}
		if refused.Waiting {
			// An error (not "unschedulable") puts the pod in the backoff queue, which retries it
			// by itself until its bounded wait ends: no cluster event is needed for the next try.
			return nil, newStatus(fwk.Error, refused.Message)
		}
		return nil, newStatus(fwk.UnschedulableAndUnresolvable, refused.Message)
	}
	if ask == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// Asked to place a pod: this replica schedules, and contends for the placement lease.
	p.fence.Campaign()
	data := &cycleState{ask: ask}
	state.Write(stateKey, data)
	p.cycle.Store(&cycleOf{state: state, pod: pod.UID, data: data})
	return nil, nil
}

// PreFilterExtensions: none. The plugin's fit does not depend on other pods' requests as the
// framework models them (nominated pods under preemption), only on its own reservations.
func (p *TmcPlacement) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter keeps the nodes that can hold the pod's configuration now.
func (p *TmcPlacement) Filter(_ context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) *fwk.Status {
	s, err := p.readCycle(state, pod)
	if err != nil {
		return asStatus(err)
	}
	switch v := p.Fit(info.Node(), s.ask); {
	case v == nil:
		return nil
	case v.Unresolvable:
		return newStatus(fwk.UnschedulableAndUnresolvable, v.Reason)
	default:
		return newStatus(fwk.Unschedulable, v.Reason)
	}
}

// PreScore skips the Score of pods the plugin does not place.
func (p *TmcPlacement) PreScore(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, err := readState(state); err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is the node's preference for the pod (its machine pattern, Preference) and its packing
// score, as preference * 11 + packing; NormalizeScore combines them over the nodes that passed
// Filter (Combine) and scales the packing score's 0..10 (the extender protocol's scale) to the
// framework's 0..100.
func (p *TmcPlacement) Score(_ context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := p.readCycle(state, pod)
	if err != nil {
		return 0, asStatus(err)
	}
	return int64(p.RawScore(info.Node(), s.ask)), nil
}

// ScoreExtensions: NormalizeScore.
func (p *TmcPlacement) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore turns Score's raw values into scores: Combine over the nodes scored, times 10.
func (p *TmcPlacement) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	raw := make([]int, len(scores))
	for i, s := range scores {
		raw[i] = int(s.Score)
	}
	for i, s := range Normalize(raw) {
		scores[i].Score = int64(s) * (fwk.MaxNodeScore / MaxPackingScore)
	}
	return nil
}

// Reserve assumes the pod's configuration on the chosen node, choosing its CAT run.
func (p *TmcPlacement) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := readState(state)
	if err != nil {
		return nil // not a tiered pod
	}
	node, err := p.node(nodeName)
	if err != nil {
		return asStatus(err)
	}
	held, err := p.Engine.Reserve(pod.UID, node, s.ask)
	if err != nil {
		return asStatus(err)
	}
	s.held = &held
	return nil
}

// Unreserve forgets what Reserve assumed; idempotent, and a no-op for a pod it never reserved.
func (p *TmcPlacement) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) {
	if s, err := readState(state); err == nil {
		s.held = nil
	}
	p.Forget(pod.UID)
}

// PlacementOf is what the pod was given, as the node agent reads it.
func PlacementOf(ask *PodAsk, held Reservation) *Placement {
	schema := PlacementSchema
	if ask.PlanFrom != nil {
		schema = PlacementSchemaV3
	}
	var sizedFrom *v1alpha1.SizedFrom // left out: the pod's request, as a reader takes an absent one
	if ask.SizedFromRecommendation() {
		recommendation := v1alpha1.SizedFromRecommendation
		sizedFrom = &recommendation
	}
	return &Placement{
		Schema:    schema,
		Node:      held.Node,
		Workload:  ask.Workload,
		Objective: ask.Objective,
		Configuration: PlacedConfiguration{
			VCPUs: held.VCPUs, DRAMBytes: held.DRAMBytes, SlowBytes: held.SlowBytes,
			SlowRatio: PyFloat(ask.SlowRatio), LLCWays: UsedWays(held.LLCMask),
		},
		LLCMask:          FormatMask(held.LLCMask),
		SlowFromPool:     held.SlowFromPool,
		RecommendationID: ask.RecommendationID,
		Fallback:         ask.Fallback,
		FallbackReason:   ask.FallbackReason,
		Plan:             ask.Plan,
		PlanFrom:         ask.PlanFrom,
		SizedFrom:        sizedFrom,
	}
}

// PlacementBinding is the Binding Bind posts: the node, and the placement annotations, which the
// API server writes onto the pod in the same update that sets its node (so no pod is ever bound
// without its placement, nor annotated with one it was not bound to). The pod's UID is a
// precondition: a pod deleted and recreated under the same name is neither bound nor annotated.
func PlacementBinding(pod *v1.Pod, placement *Placement) (*v1.Binding, error) {
	ann, err := PlacementAnnotations(placement)
	if err != nil {
		return nil, err
	}
	return &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Annotations: ann},
		Target:     v1.ObjectReference{Kind: "Node", Name: placement.Node},
	}, nil
}

// Bind binds a tiered pod with its placement in one request; other pods are left to the next
// binder (DefaultBinder), which the configuration lists after this plugin.
func (p *TmcPlacement) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, err := readState(state)
	if err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return asStatus(p.Engine.Bind(ctx, pod, s.ask, nodeName))
}

// schedulerText is a message as kube-scheduler can pass it on: the scheduler records a failed
// pod's event with the message as the event's format string (no arguments), and the pod's
// PodScheduled condition with the message as it is, whether the message came from a plugin's
// status or from an extender's answer. No string with a "%" reads right in both ("slo:5%" would
// be "%!"(MISSING)" in the event, "%%" in the condition), and a look-alike sign defeats a search
// for the objective; so a percent is written as the word.
func schedulerText(msg string) string {
	return strings.ReplaceAll(msg, "%", " percent")
}

// newStatus is a status whose message is schedulerText.
func newStatus(code fwk.Code, msg string) *fwk.Status {
	return fwk.NewStatus(code, schedulerText(msg))
}

// asStatus is fwk.AsStatus with newStatus's message.
func asStatus(err error) *fwk.Status {
	if err == nil {
		return nil
	}
	return newStatus(fwk.Error, err.Error())
}
