package tmc

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// cacheSnapshot is everything the cache holds, followed from the Cache through every pointer,
// map and slice (its records and their views, its rack pools, its index, its counters; the
// node objects by address only: they are the informers'): each object reached is kept by
// address and type with its contents, so that an object replaced by an equal one differs too.
// Two snapshots are equal when nothing wrote to the cache between them. The lock is left out:
// a reader holds it while it reads.
type cacheSnapshot struct {
	Fields  map[string]any // the Cache's own fields, pointers as addresses
	Objects map[string]any // type@address -> contents, for every object reachable
}

func snapshot(c *Cache) cacheSnapshot {
	c.mu.RLock()
	defer c.mu.RUnlock()
	w := &walker{objects: map[string]any{}}
	s := cacheSnapshot{Fields: map[string]any{}, Objects: w.objects}
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		s.Fields[v.Type().Field(i).Name] = w.of(v.Field(i))
	}
	return s
}

// walker copies what a value holds (reflect reads unexported fields, never writes them).
type walker struct{ objects map[string]any }

var (
	lockType = reflect.TypeFor[sync.RWMutex]()
	nodeType = reflect.TypeFor[*v1.Node]()
)

func (w *walker) of(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		key := fmt.Sprintf("%s@%x", v.Type(), v.Pointer())
		if _, seen := w.objects[key]; !seen && v.Type() != nodeType {
			w.objects[key] = nil // reached: a cycle back to it stops here
			w.objects[key] = w.of(v.Elem())
		}
		return key
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		entries := map[string]any{}
		for it := v.MapRange(); it.Next(); {
			entries[fmt.Sprint(w.of(it.Key()))] = w.of(it.Value())
		}
		return []any{v.Pointer(), entries}
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		out := []any{v.Pointer(), v.Len()}
		for i := range v.Len() {
			out = append(out, w.of(v.Index(i)))
		}
		return out
	case reflect.Array:
		out := []any{}
		for i := range v.Len() {
			out = append(out, w.of(v.Index(i)))
		}
		return out
	case reflect.Struct:
		t := v.Type()
		if t == lockType {
			return nil
		}
		if t.PkgPath() == "sync/atomic" && strings.HasPrefix(t.Name(), "Pointer[") {
			// An atomic.Pointer[T]: its unsafe.Pointer read as the *T it holds.
			p := v.FieldByName("v").UnsafePointer()
			if p == nil {
				return nil
			}
			return w.of(reflect.NewAt(t.Field(0).Type.Elem().Elem(), p))
		}
		out := map[string]any{}
		for i := range v.NumField() {
			out[t.Field(i).Name] = w.of(v.Field(i))
		}
		return out
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return []any{v.Elem().Type().String(), w.of(v.Elem())}
	case reflect.UnsafePointer, reflect.Func, reflect.Chan:
		return v.Pointer()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.String:
		return v.String()
	}
	return fmt.Sprintf("unwalked %s", v.Type())
}

// changes names what differs between two snapshots: the Cache's fields, and the objects
// changed, made or gone (by type).
func (s cacheSnapshot) changes(after cacheSnapshot) []string {
	var out []string
	for name, v := range s.Fields {
		if !reflect.DeepEqual(v, after.Fields[name]) {
			out = append(out, "field "+name)
		}
	}
	for key, v := range s.Objects {
		kind, _, _ := strings.Cut(key, "@")
		if now, ok := after.Objects[key]; !ok {
			out = append(out, "gone "+kind)
		} else if !reflect.DeepEqual(v, now) {
			out = append(out, "changed "+kind)
		}
	}
	for key := range after.Objects {
		if _, ok := s.Objects[key]; !ok {
			kind, _, _ := strings.Cut(key, "@")
			out = append(out, "made "+kind)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// boundPod is a pod bound to node with a placement of cpus CPUs and 1 GiB of DRAM.
func boundPod(t *testing.T, name, node string, cpus int64) *v1.Pod {
	t.Helper()
	pod := tieredPod(name, nil, "1", "1Gi")
	pod.UID = types.UID(name)
	pod.Spec.NodeName = node
	ann, err := PlacementAnnotations(&Placement{
		Schema: PlacementSchema, Node: node, Objective: "cheapest", LLCMask: "0x3",
		Configuration: PlacedConfiguration{VCPUs: cpus, DRAMBytes: 1 << 30, LLCWays: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = ann
	return pod
}

// kube-scheduler calls a hint once per pending pod for each event: the hints change neither the
// cache nor the recommendation index, whatever the event.
func TestHintsOnlyRead(t *testing.T) {
	index := NewRecommendationIndex()
	index.Set("kv-cheapest", map[string]any{"workload": "kv", "objective": "cheapest"})
	p := &TmcPlacement{Engine: &Engine{cache: NewCache(), published: index}}
	p.ObserveNode(tmcNode("a", 4, 32<<30, 0, 8, "", 0))
	bound := boundPod(t, "bound", "a", 2)
	p.ObservePod(bound)
	if _, err := p.cache.Assume("assumed", "a", &NodeCapacity{DRAMBytes: 32 << 30, LLCWays: 8}, 4, fallbackAsk(1, 1<<30)); err != nil {
		t.Fatal(err)
	}
	before := snapshot(p.cache)

	waiting := tieredPod("waiting", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%"}, "1", "1Gi")
	waiting.UID = "waiting"
	ended := bound.DeepCopy()
	ended.Status.Phase = v1.PodSucceeded
	object := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"workload": "graph500", "objective": "slo:5%"}}}
	object.SetName("graph500-slo")
	events, err := p.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, event := range events {
		if event.QueueingHintFn == nil {
			continue
		}
		for _, change := range [][2]any{{nil, object}, {bound, nil}, {bound, ended}, {waiting, waiting}} {
			if _, err := event.QueueingHintFn(klog.Background(), waiting, change[0], change[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if changed := before.changes(snapshot(p.cache)); len(changed) > 0 {
		t.Errorf("a hint wrote to the cache: %v", changed)
	}
	if _, ok := index.Lookup("graph500", "slo:5%"); ok || index.Len() != 1 {
		t.Errorf("a hint changed the index: %d held", index.Len())
	}
}

// Filter reads: a node full with a pod the informer's store no longer holds (deleted; the
// engine's own handler not run yet) fits the pod the deletion moved, and the cache still holds
// the gone pod until the handler releases it.
func TestFitOnlyReadsAndJudgesWithoutGonePods(t *testing.T) {
	e := &Engine{cache: NewCache()}
	node := tmcNode("a", 2, 4<<30, 0, 8, "", 0)
	node.ResourceVersion = "1"
	e.ObserveNode(node)
	e.ObservePod(boundPod(t, "gone", "a", 2))
	ask := fallbackAsk(1, 1<<30)

	if v := e.Fit(node, ask); v == nil || v.Unresolvable {
		t.Fatalf("without a pod store the node is full: %+v", v)
	}
	stored := map[types.UID]bool{"gone": true}
	e.podExists = func(uid types.UID) bool { return stored[uid] }
	if v := e.Fit(node, ask); v == nil {
		t.Fatal("a pod the store holds still counts")
	}
	delete(stored, "gone")
	before := snapshot(e.cache)
	for range 3 {
		if v := e.Fit(node, ask); v != nil {
			t.Fatalf("the room of a pod the store no longer holds: %+v", v)
		}
	}
	if changed := before.changes(snapshot(e.cache)); len(changed) > 0 {
		t.Errorf("Fit wrote to the cache: %v", changed)
	}
	if _, held := e.cache.Held("gone"); !held {
		t.Fatal("Fit released a reservation")
	}
	// Reserve judges as Filter did; the handler's release then leaves the new pod alone.
	r, err := e.Reserve("new", node, ask)
	if err != nil {
		t.Fatalf("Reserve after Filter passed: %v", err)
	}
	e.cache.Release("gone") // the pod informer's delete handler
	capacity, cpus, _ := nodeCapacity(node)
	if u := e.cache.Usage("a", capacity, cpus); u.UsedCPUs != 1 || u.UsedMask != r.LLCMask || e.cache.Len() != 1 {
		t.Errorf("after the handler released the gone pod: %+v, %d held", u, e.cache.Len())
	}
}

// cycleOverUndelivered is a cluster whose scheduling cycle holds node objects the engine's node
// handler has not delivered (kube-scheduler's snapshot and the handler follow the same informer
// at their own pace): one it never delivered (with a bound pod counted on it already, or none),
// one a version ahead of the cache or behind it, the cache's version in another object (a
// relist; the extender's decoded nodes), one updated after the cache's index was made; beside
// them nodes it delivered. delivered is the same cluster once the handler has delivered every
// object the cycle holds.
type cycleOverUndelivered struct {
	plugin, delivered *TmcPlacement
	state, settled    fwk.CycleState
	pod               *v1.Pod
	bound             *v1.Pod
	nodes             []*v1.Node
	infos             []fwk.NodeInfo
}

func newCycleOverUndelivered(t *testing.T) *cycleOverUndelivered {
	at := func(node *v1.Node, version string) *v1.Node { node.ResourceVersion = version; return node }
	cordoned := func(node *v1.Node) *v1.Node { node.Spec.Unschedulable = true; return node }
	e, delivered := &Engine{cache: NewCache()}, &Engine{cache: NewCache()}
	c := &cycleOverUndelivered{plugin: &TmcPlacement{Engine: e}, delivered: &TmcPlacement{Engine: delivered},
		pod: tieredPod("p", nil, "1", "1Gi"), bound: boundPod(t, "full", "counted", 2)}
	for i := range 16 { // enough nodes that one update leaves the index as it was made
		node := at(tmcNode(fmt.Sprintf("n%d", i), 8, 32<<30, 0, 8, "", 0), "1")
		e.ObserveNode(node)
		delivered.ObserveNode(node)
		c.nodes = append(c.nodes, node)
	}
	e.ObservePod(c.bound)
	delivered.ObservePod(c.bound)
	e.ObserveNode(at(tmcNode("newer", 8, 32<<30, 0, 8, "", 0), "1"))
	e.ObserveNode(cordoned(at(tmcNode("older", 8, 32<<30, 0, 8, "", 0), "3")))
	relisted := at(tmcNode("relisted", 8, 32<<30, 0, 8, "", 0), "5")
	e.ObserveNode(relisted)
	updated := at(tmcNode("updated", 8, 32<<30, 0, 8, "", 0), "2")
	e.ObserveNode(at(tmcNode("updated", 8, 32<<30, 0, 8, "", 0), "1"))
	e.ObserveNode(updated)
	for _, node := range []*v1.Node{
		at(tmcNode("never", 8, 32<<30, 0, 8, "", 0), "4"),
		at(tmcNode("counted", 2, 32<<30, 0, 8, "", 0), "4"),         // never delivered, its bound pod counted
		cordoned(at(tmcNode("newer", 8, 32<<30, 0, 8, "", 0), "2")), // a version ahead of the cache's
		at(tmcNode("older", 8, 32<<30, 0, 8, "", 0), "2"),           // a version behind
		relisted.DeepCopy(), // the cache's version in another object
		updated,             // updated after the index was made
	} {
		delivered.ObserveNode(node)
		c.nodes = append(c.nodes, node)
	}
	for _, node := range c.nodes {
		info := framework.NewNodeInfo()
		info.SetNode(node)
		c.infos = append(c.infos, info)
	}
	c.state, c.settled = framework.NewCycleState(), framework.NewCycleState()
	if _, s := c.plugin.PreFilter(context.Background(), c.state, c.pod, nil); !s.IsSuccess() {
		t.Fatal(s)
	}
	if _, s := c.delivered.PreFilter(context.Background(), c.settled, c.pod, nil); !s.IsSuccess() {
		t.Fatal(s)
	}
	return c
}

// Filter and Score, through both front doors, and the queueing hints write nothing the cache
// holds (records, views, pools, index, counters), however often they ask, also for the nodes
// the node handler has not delivered as the cycle holds them; and they answer for those as the
// cache does once its handler has delivered the cycle's objects. Each starts from the cache as
// the handlers left it.
func TestTheSchedulingCycleOnlyReadsNodesTheCacheHasNotSeen(t *testing.T) {
	ctx := context.Background()
	extenders := func(c *cycleOverUndelivered) (*Extender, *Extender, *extenderv1.ExtenderArgs) {
		decoded := &v1.NodeList{}
		for _, node := range c.nodes {
			decoded.Items = append(decoded.Items, *node.DeepCopy())
		}
		lister := corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
		return NewExtender(c.plugin.Engine, nil, lister, ExtenderOptions{}), NewExtender(c.delivered.Engine, nil, lister, ExtenderOptions{}),
			&extenderv1.ExtenderArgs{Pod: c.pod, Nodes: decoded}
	}
	for _, phase := range []struct {
		name string
		run  func(c *cycleOverUndelivered) func()
	}{
		{"Filter", func(c *cycleOverUndelivered) func() {
			return func() {
				for i, info := range c.infos {
					got, want := c.plugin.Filter(ctx, c.state, c.pod, info), c.delivered.Filter(ctx, c.settled, c.pod, info)
					if got.Code() != want.Code() || got.Message() != want.Message() {
						t.Errorf("Filter of %s: %v, as the cache answers once it holds the object: %v", c.nodes[i].Name, got, want)
					}
				}
			}
		}},
		{"Score", func(c *cycleOverUndelivered) func() {
			return func() {
				for i, info := range c.infos {
					got, _ := c.plugin.Score(ctx, c.state, c.pod, info)
					if want, _ := c.delivered.Score(ctx, c.settled, c.pod, info); got != want {
						t.Errorf("Score of %s: %d, as the cache answers once it holds the object: %d", c.nodes[i].Name, got, want)
					}
				}
			}
		}},
		{"the extender's filter and prioritize", func(c *cycleOverUndelivered) func() {
			ext, settled, args := extenders(c)
			return func() {
				if got, want := ext.Filter(args), settled.Filter(args); !reflect.DeepEqual(got, want) {
					t.Errorf("the extender's filter: %+v, as the cache answers once it holds the objects: %+v", got, want)
				}
				if got, want := ext.Prioritize(args), settled.Prioritize(args); !reflect.DeepEqual(got, want) {
					t.Errorf("the extender's prioritize: %+v, as the cache answers once it holds the objects: %+v", got, want)
				}
			}
		}},
		{"the queueing hints", func(c *cycleOverUndelivered) func() {
			events, err := c.plugin.EventsToRegister(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ended := c.bound.DeepCopy()
			ended.Status.Phase = v1.PodSucceeded
			return func() {
				for _, event := range events {
					if event.QueueingHintFn == nil {
						continue
					}
					for _, change := range [][2]any{{c.bound, nil}, {c.bound, ended}, {c.pod, c.pod}} {
						if _, err := event.QueueingHintFn(klog.Background(), c.pod, change[0], change[1]); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}},
	} {
		c := newCycleOverUndelivered(t)
		run := phase.run(c)
		before := snapshot(c.plugin.cache)
		for range 3 { // several pods: a cache that wrote on a read would show it by the third
			run()
		}
		if changed := before.changes(snapshot(c.plugin.cache)); len(changed) > 0 {
			t.Errorf("%s wrote to the cache: %v", phase.name, changed)
		}
	}
	// The answers themselves: each node as the cycle's object has it, with what is held on it.
	c := newCycleOverUndelivered(t)
	for i, want := range map[int]string{
		16: "",                          // never delivered
		17: "tmc: not enough free CPUs", // never delivered: its bound pod holds both its CPUs
		18: "tmc: node is not ready",    // the cycle's version cordons it
		19: "",                          // the cache's later version cordons it, the cycle's does not
	} {
		if got := c.plugin.Filter(ctx, c.state, c.pod, c.infos[i]); got.Message() != want {
			t.Errorf("Filter of %s: %v, want %q", c.nodes[i].Name, got, want)
		}
	}
}

type activations struct{ pods []string }

func (a *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	for key := range pods {
		a.pods = append(a.pods, key)
	}
}

var _ fwk.PodActivator = (*activations)(nil)

// The recommendation informer's handler, not the hint, moves the pods waiting for a pair: once
// the plugin's index holds the pair's object, the pods not bound yet that read it are moved.
func TestThePairsObjectMovesItsWaitingPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := tieredPod("waiting", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5.000%"}, "1", "1Gi")
	other := tieredPod("other", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "cheapest"}, "1", "1Gi")
	bound := boundPod(t, "bound", "a", 1)
	bound.Annotations[WorkloadAnnotation] = "graph500"
	bound.Annotations[ObjectiveAnnotation] = "slo:5%"
	p, _ := watched(ctx, t, waiting, other, bound)

	moved := &activations{}
	index := NewRecommendationIndex()
	index.OnPublished(func(workload, objective string) { p.activateWaiting(moved, workload, objective) })
	index.Handler().OnAdd(published("graph500-slo", graph500Spec(2)), false)
	if len(moved.pods) != 1 || moved.pods[0] != "default/waiting" {
		t.Errorf("moved %v, want the waiting pod of the pair only", moved.pods)
	}
	if _, ok := index.Lookup("graph500", "slo:5%"); !ok {
		t.Error("the index does not hold the object it moved the pods for")
	}
}
