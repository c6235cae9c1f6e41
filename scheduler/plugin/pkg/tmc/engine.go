package tmc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
)

// Engine is the placement rule and its state, the one implementation behind both front doors:
// the framework plugin (TmcPlacement, in tmc-scheduler) and the scheduler extender (extender.go's HTTP
// verbs, in tmc-extender). It reads a pod's ask, judges and scores a node for it, reserves
// the pod's configuration in the cache and binds the pod with its placement; its cache is fed
// by the pod and node informers. The front doors only translate their callers' calls into these.
type Engine struct {
	client kubernetes.Interface
	cache  *Cache
	// published holds the recommendations the publisher wrote (nil: pods' annotations only).
	published Published
	// wait is how long a pod whose workload has no published recommendation waits for one.
	wait time.Duration
	now  func() time.Time
	// fence, when set, must be held at each bind (a stale leader binds nothing).
	fence *Fence
	// podExists reports whether the pod informer's store still holds a pod (nil: no store).
	podExists func(types.UID) bool
	// waiting lists the pods not bound yet that read the recommendation of a pair (workload,
	// canonical objective), from the pod informer's store (nil: no store).
	waiting func(workload, objective string) []*v1.Pod
	// nodePlugin, when set, is the NRI plugin a placed pod's containers require on the node.
	nodePlugin string
	// recorder, when set, tells a bound pod what it should know of its placement (a request
	// below its profile's footprint, or none at all).
	recorder events.EventRecorder
	// tenants, when it selects, is where tmc places pods and trusts placements; the namespace
	// informer gives namespaceLabels (false: not known) and namespacesSynced (watchNamespaces).
	tenants          *TenantNamespaces
	namespaceLabels  func(string) (map[string]string, bool)
	namespacesSynced func() bool
	// seals, when set, seal every placement the engine writes, and a bound pod's placement
	// counts only when its seal verifies (nil: sealing off, every readable placement counts).
	seals *SealKeys
}

// SetSealKeys has the engine seal the placements it writes and trust only sealed ones.
func SetSealKeys(e *Engine, k *SealKeys) { e.seals = k }

// SetRecorder has the engine write Events about the pods it binds.
func SetRecorder(e *Engine, r events.EventRecorder) { e.recorder = r }

// BelowProfileReason is the Warning a pod gets when it is bound with less memory than its
// recommendation was profiled at: it is given what it asked for, never cut below it, and told.
const BelowProfileReason = "MemoryBelowProfile"

// NotRequestedReason is the Normal event a pod that requests no memory gets when it is bound at
// its recommendation's own bytes: it holds them, but no container of it is limited to them (it
// never asked for them), and the pod is told how to be given a size of its own.
const NotRequestedReason = "MemoryNotRequested"

// SetFence makes every bind require the placement lease.
func SetFence(e *Engine, f *Fence) { e.fence = f }

// RequireNodePlugin makes every bind ask the node's runtime to refuse the pod's containers
// unless the NRI plugin `name` (tmc-nri registers as "tmc") processed them: a container
// created while the plugin is down fails, and the kubelet retries it, rather than running
// without its configuration. Set it only where the nodes enforce placements through NRI.
func RequireNodePlugin(e *Engine, name string) error {
	if name != "" && (len(name) > 63 || !dnsName.MatchString(name)) {
		return fmt.Errorf("the required node plugin must be a DNS label, not %q", clip(name, 40))
	}
	e.nodePlugin = name
	return nil
}

// NewEngine is an engine with an empty cache. published may be nil (pods' annotations only);
// wait is how long, from its creation, a pod of an unpublished pair waits for its object.
func NewEngine(client kubernetes.Interface, published Published, wait time.Duration) *Engine {
	return &Engine{client: client, cache: NewCache(), published: published, wait: wait, now: time.Now}
}

// Cache is the engine's accounting.
func (e *Engine) Cache() *Cache { return e.cache }

// Refusal is why a pod cannot be placed now. Waiting: its recommendation may still come (try
// again); otherwise no node will ever take it as it is. UntilPublished: it waits for its pair's
// object with no deadline, and moves when the object appears (the plugin's PreEnqueue and
// queueing hint; the extender's callers retry it with their backoff). Until: when a bounded
// wait ends and the pod takes the fallback (zero when it waits until published).
type Refusal struct {
	Message        string
	Waiting        bool
	UntilPublished bool
	Until          time.Time
}

// WaitUntilPublished is the wait of a pod of an unpublished pair that never falls back: it waits
// for its object however long the publisher takes.
const WaitUntilPublished time.Duration = -1

// Ask reads what the pod asks for: (nil, nil) for a pod that is not tmc's (it does not request
// OptInResource), a Refusal for one that cannot be placed now.
func (e *Engine) Ask(pod *v1.Pod) (*PodAsk, *Refusal) {
	ask, err := ReadPodWith(pod, e.published)
	if err != nil {
		return nil, &Refusal{Message: "tmc: " + err.Error()}
	}
	if !ask.OptedIn {
		return nil, nil
	}
	if refused := e.untrusted(pod); refused != nil {
		return nil, refused
	}
	if ask.Unpublished && e.published != nil && e.wait != 0 && e.now != nil {
		pair := fmt.Sprintf("workload %q, objective %q", clip(*ask.Workload, 253), clip(ask.Objective, 64))
		if e.wait < 0 {
			// Never the fallback (every way of the longest free run) for a pod whose pair
			// simply has not been published yet: the publisher publishes it when it sees the
			// pod, and the pod moves when the object appears.
			return nil, &Refusal{Waiting: true, UntilPublished: true, Message: fmt.Sprintf(
				"tmc: waiting for the recommendation of %s: no %s is published for it yet",
				pair, RecommendationKind)}
		}
		// The publisher sees the pod's workload when the pod is created and publishes within a
		// second or so: the pod is tried again until then, up to the wait.
		if age := e.now().Sub(pod.CreationTimestamp.Time); age < e.wait {
			return nil, &Refusal{Waiting: true, Until: pod.CreationTimestamp.Add(e.wait), Message: fmt.Sprintf(
				"tmc: waiting for the recommendation of %s (%s; fallback after %s)",
				pair, RecommendationKind, e.wait)}
		}
	}
	return ask, nil
}

// Fit is whether node can hold ask now: nil when it can, else the verdict (Unresolvable when
// it never can: not a tmc node, or too small; otherwise full, or not ready, now). It only
// reads the cache: Filter judges many nodes at once, and every change to the cache comes from
// Reserve, Unreserve, Bind and the informers' handlers.
func (e *Engine) Fit(node *v1.Node, ask *PodAsk) *Verdict {
	if node == nil {
		return &Verdict{Reason: "tmc: node not found", Unresolvable: true}
	}
	state := e.cache.State(node, PlacedKey{}, false)
	capacity, cpus := state.Capacity, state.CPUs
	if state.Err != nil {
		return &Verdict{Reason: "tmc: " + state.Err.Error(), Unresolvable: true}
	}
	if capacity == nil {
		return &Verdict{Reason: "tmc: node publishes no tiered capacity (not a tmc node)", Unresolvable: true}
	}
	v := Judge(state.Usage, ask.Ask())
	if v != nil && v.Unresolvable {
		return v
	}
	// After the capacity checks and before the load checks: a node too small for the pod
	// never fits, ready or not.
	if !state.Ready {
		return &Verdict{Reason: "tmc: node is not ready"}
	}
	if v != nil && e.podExists != nil {
		// Full with pods that may be gone: judged again as the API server has the node.
		if u, ok := e.cache.UsageWithout(node.Name, capacity, cpus, e.gone); ok {
			v = Judge(u, ask.Ask())
		}
	}
	return v
}

// gone reports a pod the pod informer's store no longer holds (deleted, or finished: the
// scheduler's informer drops ended pods). The store is updated before any listener hears of
// the change, so a pod moved by the event that freed the room finds it free in Fit and Reserve
// even when this engine's own handler has not released it yet: they judge without it, and the
// handler releases it. Asked only when a node is full for a pod: the common path costs nothing.
func (e *Engine) gone(uid types.UID) bool { return !e.podExists(uid) }

// RawScore is the node's preference for the pod (its machine pattern) and its packing score, as
// preference * scoreBase + packing: Normalize turns the raw scores of the nodes that fit into
// scores.
func (e *Engine) RawScore(node *v1.Node, ask *PodAsk) int {
	if node == nil {
		return 0
	}
	key, counted := countedAs(ask)
	state := e.cache.State(node, key, counted)
	if state.Err != nil || state.Capacity == nil || state.Usage.DRAMBytes == 0 {
		return 0 // Fit kept it out; a node that changed since scores lowest
	}
	score := PackingScore(state.Usage.Load(), ask.Ask())
	return state.Preference*scoreBase + score
}

// Normalize turns raw scores (RawScore, over the nodes that fit) into scores 0..MaxPackingScore:
// the nodes at the highest preference present keep their packing score, the others score 0.
func Normalize(raw []int) []int {
	preferences, packing := make([]int, len(raw)), make([]int, len(raw))
	for i, s := range raw {
		preferences[i], packing[i] = s/scoreBase, s%scoreBase
	}
	return Combine(preferences, packing)
}

// Reserve assumes the pod's configuration on the node in the cache, choosing its CAT run.
func (e *Engine) Reserve(uid types.UID, node *v1.Node, ask *PodAsk) (Reservation, error) {
	if node == nil {
		return Reservation{}, fmt.Errorf("tmc: node not found")
	}
	capacity, cpus, err := nodeCapacity(node)
	if err != nil {
		return Reservation{}, err
	}
	if capacity == nil {
		return Reservation{}, fmt.Errorf("tmc: node %s publishes no tiered capacity", node.Name)
	}
	var gone func(types.UID) bool
	if e.podExists != nil {
		gone = e.gone
	}
	return e.cache.AssumeWithout(uid, node.Name, capacity, cpus, ask, gone)
}

// Forget drops what Reserve assumed for a pod that is not bound.
func (e *Engine) Forget(uid types.UID) { e.cache.Forget(uid) }

// Bind binds the pod to the node with its placement in one request (the Binding's annotations,
// which the API server writes onto the pod in the same update that sets its node), from the
// reservation the cache holds for it there.
func (e *Engine) Bind(ctx context.Context, pod *v1.Pod, ask *PodAsk, nodeName string) (err error) {
	started := time.Now()
	defer func() { placement.observeBind(ask, err, started) }()
	held, ok := e.cache.Held(pod.UID)
	if !ok || held.Node != nodeName {
		return fmt.Errorf("tmc: pod %s/%s holds no reservation on %s", pod.Namespace, pod.Name, nodeName)
	}
	placement := PlacementOf(ask, held)
	binding, err := PlacementBinding(pod, placement)
	if err != nil {
		return err
	}
	if err := sealPlacement(binding.Annotations, pod, e.seals); err != nil {
		return err
	}
	if e.nodePlugin != "" {
		if err := requirePlugin(binding.Annotations, pod, e.nodePlugin); err != nil {
			return err
		}
	}
	// Right before the request: a replica paused since its cycle began finds its lease stale.
	if err := e.fence.Held(); err != nil {
		return err
	}
	if err := e.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("tmc: binding pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// Counted as bound at once, as the pod informer will count it: nothing (a retried or a
	// parallel attempt) may release it before the pod's deletion.
	e.cache.Bind(pod.UID, placement)
	if e.recorder != nil && ask.BelowProfile() {
		e.recorder.Eventf(pod, nil, v1.EventTypeWarning, BelowProfileReason, "Binding", "%s", belowProfileMessage(ask, placement))
	}
	if e.recorder != nil && ask.SizedFromRecommendation() {
		e.recorder.Eventf(pod, nil, v1.EventTypeNormal, NotRequestedReason, "Binding", "%s", notRequestedMessage(ask, placement))
	}
	return nil
}

// notRequestedMessage says what a pod that requests no memory holds, and how to size it.
func notRequestedMessage(ask *PodAsk, placement *Placement) string {
	c := placement.Configuration
	return fmt.Sprintf("the pod requests no memory: it holds the footprint its recommendation %s was made for, "+
		"%s of DRAM and %s of slow memory (slow ratio %s), and tmc sets no memory limit on its containers; "+
		"give the pod a memory request of the size it runs at to be given that size, split by the recommendation",
		recommendationName(ask), quantity(c.DRAMBytes), quantity(c.SlowBytes), strconv.FormatFloat(float64(c.SlowRatio), 'g', 4, 64))
}

// belowProfileMessage says what a pod bound below its profile's footprint was given, in sizes
// as Kubernetes writes them.
func belowProfileMessage(ask *PodAsk, placement *Placement) string {
	c := placement.Configuration
	return fmt.Sprintf("the pod requests %s of memory, less than the %s its recommendation %s was profiled at: "+
		"it is given its request, %s of DRAM and %s of slow memory (slow ratio %s); "+
		"if the program needs its profile's footprint, raise the pod's memory request",
		quantity(ask.MemoryBytes), quantity(ask.ProfileBytes), recommendationName(ask),
		quantity(c.DRAMBytes), quantity(c.SlowBytes), strconv.FormatFloat(float64(c.SlowRatio), 'g', 4, 64))
}

func recommendationName(ask *PodAsk) string {
	if ask.Workload == nil {
		return "(pinned on the pod)"
	}
	return fmt.Sprintf("for workload %q", clip(*ask.Workload, 253))
}

// quantity is bytes as Kubernetes writes a size ("4Gi", "32Mi", "1500M", "12345").
func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

// containerRequiredPluginsPrefix is NRI's container-scoped key: the runtime reads
// required-plugins.noderesource.dev/container.<name> before the pod-scoped key, so a pod's own
// container-scoped value (an empty list) would switch the guard off for that container.
const containerRequiredPluginsPrefix = "required-plugins.noderesource.dev/container."

// requirePlugin asks the runtime to refuse each of the pod's containers that the node plugin did
// not process: the pod-scoped key, and the container-scoped key of every container, init
// container and ephemeral container the pod has or names in a key of its own, which the Binding
// writes over whatever the pod
// set at its creation (the admission policy refuses any later change once the pod is placed).
// A container whose name is longer than 53 characters has no such key: its key's name would pass
// the 63 characters an annotation key's name may have, and the API server refuses such a key on
// every write of a pod, so nobody set one and writing it would make the pod's updates fail.
// The keys are counted with the placement against MaxPlacementAnnotationsBytes (each takes at most
// 97 + 67 bytes, so the bound leaves room for hundreds of containers beside the placement): a pod
// past it is not bound, rather than bound without the guard.
func requirePlugin(ann map[string]string, pod *v1.Pod, plugin string) error {
	value := `["` + plugin + `"]`
	ann[RequiredPluginsAnnotation] = value
	name := func(n string) {
		if len(n) <= 53 {
			ann[containerRequiredPluginsPrefix+n] = value
		}
	}
	for i := range pod.Spec.InitContainers {
		name(pod.Spec.InitContainers[i].Name)
	}
	for i := range pod.Spec.Containers {
		name(pod.Spec.Containers[i].Name)
	}
	for i := range pod.Spec.EphemeralContainers {
		name(pod.Spec.EphemeralContainers[i].Name)
	}
	// A key the pod carries for a container it does not have yet (an ephemeral container to
	// come): written over too, so that no container of the pod inherits the tenant's value.
	for key := range pod.Annotations {
		if strings.HasPrefix(key, containerRequiredPluginsPrefix) {
			ann[key] = value
		}
	}
	if size := annotationsSize(ann); size > MaxPlacementAnnotationsBytes {
		return fmt.Errorf("tmc: pod %s/%s: its placement and the runtime's required-plugins keys for its %d containers would take %d bytes of annotations, over tmc's bound of %d",
			pod.Namespace, pod.Name, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)+len(pod.Spec.EphemeralContainers),
			size, MaxPlacementAnnotationsBytes)
	}
	return nil
}

// SetRackPools gives the engine the rack pools' sizes the operator set (the chart's rackPools):
// authoritative over the sizes nodes publish.
func SetRackPools(e *Engine, pools map[string]int64) { e.cache.SetPools(pools) }

// SetPublished gives the engine the published recommendations to read (an informer's index).
func SetPublished(e *Engine, published Published) { e.published = published }
