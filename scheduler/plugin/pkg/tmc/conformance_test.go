package tmc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The conformance table (scheduler/conformance/placements.json) is shared with the extender's
// suite (tests/scheduler/test_conformance.py): the same nodes, pods and expected placements, run
// here through the plugin's extension points as kube-scheduler calls them.

var conformanceTablePath = filepath.Join("..", "..", "..", "conformance", "placements.json")

type conformanceTable struct {
	Schema    string `json:"schema"`
	About     string `json:"about"`
	Reasons   struct{ Never, Full []string }
	Scenarios []conformanceScenario `json:"scenarios"`
}

type conformanceScenario struct {
	Name            string                `json:"name"`
	About           string                `json:"about"`
	Nodes           []tableNode           `json:"nodes"`
	Recommendations []tableRecommendation `json:"recommendations"`
	Steps           []tableStep           `json:"steps"`
}

type tableNode struct {
	Name          string            `json:"name"`
	Labels        map[string]string `json:"labels"`
	Annotations   map[string]string `json:"annotations"`
	Allocatable   map[string]string `json:"allocatable"`
	Ready         *bool             `json:"ready"` // null: the node reports no Ready condition
	Unschedulable bool              `json:"unschedulable"`
}

type tableRecommendation struct {
	Workload         string          `json:"workload"`
	Objective        string          `json:"objective"`
	RecommendationID string          `json:"recommendation_id"`
	DRAMBytes        int64           `json:"dram_bytes"`
	SlowBytes        int64           `json:"slow_bytes"`
	LLCWays          int             `json:"llc_ways"`
	SlowRatio        float64         `json:"slow_ratio"`
	Plan             []StructurePlan `json:"plan"`
}

type tablePod struct {
	Name         string            `json:"name"`
	Annotations  map[string]string `json:"annotations"`
	Requests     map[string]string `json:"requests"`
	Limits       map[string]string `json:"limits"`
	InitRequests map[string]string `json:"init_requests"`
	// RecommendationAnnotation, when given, is written on the pod as it stands instead of the
	// table's recommendation for the pod's workload and objective.
	RecommendationAnnotation *string `json:"recommendation_annotation"`
	// Node: a pod that arrives bound there (its placement among its annotations).
	Node string `json:"node"`
}

type tableStep struct {
	About    string       `json:"about"`
	Schedule *tablePod    `json:"schedule"`
	Retry    string       `json:"retry"`
	Delete   string       `json:"delete"`
	Bound    *tablePod    `json:"bound"`
	Finish   string       `json:"finish"`
	Expect   *tableExpect `json:"expect"`
}

type tableExpect struct {
	Skipped bool `json:"skipped"`
	// Refused: the pod cannot be read (its requests are beyond any node), so no node is judged.
	Refused  bool           `json:"refused"`
	Feasible map[string]int `json:"feasible"` // node -> score 0..10
	// Packing, when given: node -> the packing score alone, before the machine pattern's
	// preference (the score a placement without patterns would use).
	Packing   map[string]int    `json:"packing"`
	Full      map[string]string `json:"full"` // node -> reason code
	Never     map[string]string `json:"never"`
	Chosen    *string           `json:"chosen"`
	Placement *tablePlacement   `json:"placement"`
}

type tablePlacement struct {
	VCPUs        int64  `json:"vcpus"`
	DRAMBytes    int64  `json:"dram_bytes"`
	SlowBytes    int64  `json:"slow_bytes"`
	LLCMask      string `json:"llc_mask"`
	SlowFromPool bool   `json:"slow_from_pool"`
	Fallback     bool   `json:"fallback"`
}

func loadConformanceTable(t *testing.T) conformanceTable {
	t.Helper()
	raw, err := os.ReadFile(conformanceTablePath)
	if err != nil {
		t.Fatal(err)
	}
	var table conformanceTable
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields() // a misspelt expectation must not be silently ignored
	if err := dec.Decode(&table); err != nil {
		t.Fatalf("%s: %v", conformanceTablePath, err)
	}
	if table.Schema != "tmc.conformance/v1" {
		t.Fatalf("%s: schema %q", conformanceTablePath, table.Schema)
	}
	return table
}

// The plugin's reasons, as the table's codes. The wording is each path's own; the table holds
// only the category.
var reasonPatterns = []struct{ code, text string }{
	{"no-capacity", "publishes no tiered capacity"},
	{"cpus", "node has fewer than"}, // before "ways": both start alike
	{"dram", "node has less DRAM"},
	{"no-slow-tier", "node has no slow memory tier"},
	{"slow-too-small", "slow tier (local or pool) is smaller"},
	{"not-ready", "node is not ready"},
	{"free-cpus", "not enough free CPUs"},
	{"free-dram", "not enough free DRAM"},
	{"free-slow", "not enough free slow memory"},
	{"free-ways", "no free run of"},
}

func reasonCode(message string, node *v1.Node) string {
	if strings.Contains(message, "LLC ways") && strings.Contains(message, "node has fewer than") {
		return "ways"
	}
	for _, p := range reasonPatterns {
		if strings.Contains(message, p.text) {
			return p.code
		}
	}
	// A node whose tiered capacity cannot be read is, to the extender, not a tmc node.
	if _, err := ParseNodeCapacity(node.Labels, node.Annotations); err != nil {
		return "no-capacity"
	}
	return "unknown: " + message
}

func tableNodeObject(n tableNode) *v1.Node {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, Annotations: n.Annotations},
		Spec:       v1.NodeSpec{Unschedulable: n.Unschedulable},
		Status:     v1.NodeStatus{Allocatable: v1.ResourceList{}},
	}
	for name, q := range n.Allocatable {
		node.Status.Allocatable[v1.ResourceName(name)] = resource.MustParse(q)
	}
	if n.Ready != nil {
		status := v1.ConditionFalse
		if *n.Ready {
			status = v1.ConditionTrue
		}
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status}}
	}
	return node
}

func resourceList(m map[string]string) v1.ResourceList {
	if m == nil {
		return nil
	}
	list := v1.ResourceList{}
	for name, q := range m {
		list[v1.ResourceName(name)] = resource.MustParse(q)
	}
	return list
}

func podObjective(ann map[string]string) string {
	if o := ann[ObjectiveAnnotation]; o != "" {
		return o
	}
	return defaultObjective
}

// recommendationFor is the table's recommendation for a pod's workload and objective: the one
// the extender's decision source gives, and the one written on the pod for the plugin.
func (sc *conformanceScenario) recommendationFor(ann map[string]string) *tableRecommendation {
	for i, r := range sc.Recommendations {
		if r.Workload == ann[WorkloadAnnotation] && r.Objective == podObjective(ann) {
			return &sc.Recommendations[i]
		}
	}
	return nil
}

func (sc *conformanceScenario) podObject(p tablePod) *v1.Pod {
	ann := map[string]string{}
	for k, v := range p.Annotations {
		ann[k] = v
	}
	if p.RecommendationAnnotation != nil {
		ann[RecommendationAnnotation] = *p.RecommendationAnnotation
	} else if r := sc.recommendationFor(p.Annotations); r != nil {
		workload, objective, id := r.Workload, r.Objective, r.RecommendationID
		plan := r.Plan
		if plan == nil {
			plan = []StructurePlan{}
		}
		text, err := json.Marshal(Recommendation{
			Schema: RecommendationSchema, Workload: &workload, Objective: &objective, RecommendationID: &id,
			DRAMBytes: r.DRAMBytes, SlowBytes: r.SlowBytes, LLCWays: r.LLCWays, SlowRatio: r.SlowRatio, Plan: plan,
		})
		if err != nil {
			panic(err)
		}
		ann[RecommendationAnnotation] = string(text)
	}
	// A request missing beside its limit is the limit: the API server defaults it so on create,
	// before any scheduler reads the pod (the Python run creates the pods on a real one).
	requests, limits := resourceList(p.Requests), resourceList(p.Limits)
	if requests == nil && limits != nil {
		requests = v1.ResourceList{}
	}
	for name, q := range limits {
		if _, ok := requests[name]; !ok {
			requests[name] = q
		}
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: "default", UID: types.UID("uid-" + p.Name), Annotations: ann, Labels: tieredLabels(),
		},
		Spec: v1.PodSpec{
			SchedulerName: "tmc-scheduler",
			Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
				Requests: requests, Limits: limits,
			}}},
		},
	}
	if p.InitRequests != nil {
		pod.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: resourceList(p.InitRequests)}}}
	}
	return pod
}

// conformanceRun drives one scenario through a plugin built as plugin_test.go's harness builds
// it: a fake API server for the Binding, the table's nodes as the scheduler's
// snapshot, and the cache fed as the informers feed it.
type conformanceRun struct {
	sc *conformanceScenario
	// door is the front door the pods go through: "plugin" (the extension points) or
	// "extender" (the HTTP verbs, in kube-scheduler's wire format).
	door       string
	ext        http.Handler
	plugin     *TmcPlacement
	client     *fake.Clientset
	nodes      map[string]*v1.Node
	infos      map[string]fwk.NodeInfo
	order      []string
	mismatches []string
	step       string
}

func (r *conformanceRun) mismatch(format string, args ...any) {
	r.mismatches = append(r.mismatches, fmt.Sprintf("[%s] %s/%s: ", r.door, r.sc.Name, r.step)+fmt.Sprintf(format, args...))
}

func newConformanceRun(sc *conformanceScenario, door string) *conformanceRun {
	r := &conformanceRun{sc: sc, door: door, client: bindingClient(), nodes: map[string]*v1.Node{}, infos: map[string]fwk.NodeInfo{}}
	r.plugin = &TmcPlacement{Engine: &Engine{client: r.client, cache: NewCache()}, node: func(name string) (*v1.Node, error) {
		if n, ok := r.nodes[name]; ok {
			return n, nil
		}
		return nil, fmt.Errorf("node %s not found", name)
	}}
	for _, n := range sc.Nodes {
		node := tableNodeObject(n)
		r.nodes[n.Name] = node
		info := framework.NewNodeInfo()
		info.SetNode(node)
		r.infos[n.Name] = info
		r.order = append(r.order, n.Name)
		r.plugin.ObserveNode(node) // the node informer's add
	}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range r.nodes {
		_ = nodes.Add(n)
	}
	// The extender over the very engine the plugin uses: the same cache, the same rule.
	r.ext = NewExtender(r.plugin.Engine, nil, corelisters.NewNodeLister(nodes), ExtenderOptions{}).Handler("/scheduler")
	return r
}

// run runs every step of the scenario and returns how many it ran.
func (r *conformanceRun) run() int {
	ctx := context.Background()
	for i, step := range r.sc.Steps {
		switch {
		case step.Schedule != nil:
			r.step = fmt.Sprintf("%d:%s", i, step.Schedule.Name)
			pod := r.sc.podObject(*step.Schedule)
			if _, err := r.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				r.mismatch("creating the pod: %v", err)
				continue
			}
			r.attempt(pod, step.Expect)
		case step.Retry != "":
			r.step = fmt.Sprintf("%d:%s (retry)", i, step.Retry)
			pod, err := r.client.CoreV1().Pods("default").Get(ctx, step.Retry, metav1.GetOptions{})
			if err != nil {
				r.mismatch("no pending pod %s: %v", step.Retry, err)
				continue
			}
			r.attempt(pod, step.Expect)
		case step.Delete != "":
			r.step = fmt.Sprintf("%d:delete %s", i, step.Delete)
			pod, err := r.client.CoreV1().Pods("default").Get(ctx, step.Delete, metav1.GetOptions{})
			if err != nil {
				r.mismatch("no pod %s: %v", step.Delete, err)
				continue
			}
			if _, held := r.plugin.cache.Held(pod.UID); !held {
				r.mismatch("the pod held nothing before its deletion")
			}
			if err := r.client.CoreV1().Pods("default").Delete(ctx, step.Delete, metav1.DeleteOptions{}); err != nil {
				r.mismatch("deleting: %v", err)
			}
			r.plugin.cache.Release(pod.UID) // the pod informer's delete
			if _, held := r.plugin.cache.Held(pod.UID); held {
				r.mismatch("the deleted pod still holds its reservation")
			}
		case step.Bound != nil:
			r.step = fmt.Sprintf("%d:%s (bound)", i, step.Bound.Name)
			pod := r.sc.podObject(*step.Bound)
			pod.Spec.NodeName = step.Bound.Node
			if _, err := r.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				r.mismatch("creating the pod: %v", err)
				continue
			}
			r.plugin.ObservePod(pod) // the pod informer's add
			if held, ok := r.plugin.cache.Held(pod.UID); !ok || !held.Bound || held.Node != step.Bound.Node {
				r.mismatch("the bound pod is not counted: %+v", held)
			}
		case step.Finish != "":
			r.step = fmt.Sprintf("%d:finish %s", i, step.Finish)
			pod, err := r.client.CoreV1().Pods("default").Get(ctx, step.Finish, metav1.GetOptions{})
			if err != nil {
				r.mismatch("no pod %s: %v", step.Finish, err)
				continue
			}
			if _, held := r.plugin.cache.Held(pod.UID); !held {
				r.mismatch("the pod held nothing before it finished")
			}
			pod.Status.Phase = v1.PodSucceeded
			if pod, err = r.client.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
				r.mismatch("finishing: %v", err)
				continue
			}
			r.plugin.ObservePod(pod) // the pod informer's update
			if _, held := r.plugin.cache.Held(pod.UID); held {
				r.mismatch("the finished pod still holds its reservation")
			}
		default:
			r.step = fmt.Sprintf("%d", i)
			r.mismatch("a step that neither schedules, retries, deletes, binds nor finishes")
		}
	}
	return len(r.sc.Steps)
}

// attempt is one scheduling cycle and, when a node is chosen, the binding cycle.
func (r *conformanceRun) attempt(pod *v1.Pod, want *tableExpect) {
	if r.door == "extender" {
		r.attemptExtender(pod, want)
		return
	}
	ctx := context.Background()
	p := r.plugin
	if want == nil {
		r.mismatch("no expectation")
		return
	}
	state := framework.NewCycleState()
	_, st := p.PreFilter(ctx, state, pod, nil)
	if want.Skipped {
		if st.Code() != fwk.Skip {
			r.mismatch("PreFilter: %v, want Skip", st)
		}
		if st := p.PreScore(ctx, state, pod, nil); st.Code() != fwk.Skip {
			r.mismatch("PreScore: %v, want Skip", st)
		}
		before := p.cache.Len()
		if st := p.Reserve(ctx, state, pod, r.order[0]); !st.IsSuccess() || p.cache.Len() != before {
			r.mismatch("Reserve of a skipped pod: %v, %d reservations, %d before", st, p.cache.Len(), before)
		}
		if _, held := p.cache.Held(pod.UID); held {
			r.mismatch("a skipped pod holds a reservation")
		}
		return
	}
	if want.Refused {
		// The pod fits nowhere, whatever the nodes: unresolvable, before any Filter.
		if st.Code() != fwk.UnschedulableAndUnresolvable {
			r.mismatch("PreFilter: %v, want UnschedulableAndUnresolvable", st)
		}
		if _, held := p.cache.Held(pod.UID); held {
			r.mismatch("a refused pod holds a reservation")
		}
		return
	}
	if !st.IsSuccess() {
		r.mismatch("PreFilter: %v", st)
		return
	}
	feasible := map[string]bool{}
	full, never := map[string]string{}, map[string]string{}
	var infos []fwk.NodeInfo
	for _, name := range r.order {
		st := p.Filter(ctx, state, pod, r.infos[name])
		switch st.Code() {
		case fwk.Success:
			feasible[name] = true
			infos = append(infos, r.infos[name])
		case fwk.Unschedulable:
			full[name] = reasonCode(st.Message(), r.nodes[name])
		case fwk.UnschedulableAndUnresolvable:
			never[name] = reasonCode(st.Message(), r.nodes[name])
		default:
			r.mismatch("Filter on %s: %v", name, st)
		}
	}
	wantFeasible := map[string]bool{}
	for name := range want.Feasible {
		wantFeasible[name] = true
	}
	if !reflect.DeepEqual(feasible, wantFeasible) {
		r.mismatch("feasible %v, want %v", sortedKeys(feasible), sortedKeys(wantFeasible))
	}
	if !reflect.DeepEqual(full, orEmpty(want.Full)) {
		r.mismatch("full now %v, want %v", full, want.Full)
	}
	if !reflect.DeepEqual(never, orEmpty(want.Never)) {
		r.mismatch("never %v, want %v", never, want.Never)
	}
	if len(infos) == 0 {
		if want.Chosen != nil {
			r.mismatch("no node fits, want %s", *want.Chosen)
		}
		if _, held := p.cache.Held(pod.UID); held {
			r.mismatch("a pod no node fits holds a reservation")
		}
		return
	}
	if st := p.PreScore(ctx, state, pod, infos); !st.IsSuccess() {
		r.mismatch("PreScore: %v", st)
		return
	}
	// The highest score wins, ties to the first name; the table is written without ties at the
	// top so that neither path's tie-break decides a case.
	best, bestScore, tie := "", int64(-1), false
	names := sortedKeys(feasible)
	scores := make(fwk.NodeScoreList, 0, len(names))
	for _, name := range names {
		raw, st := p.Score(ctx, state, pod, r.infos[name])
		if !st.IsSuccess() {
			r.mismatch("Score on %s: %v", name, st)
			continue
		}
		if w, ok := want.Packing[name]; ok && int(raw)%scoreBase != w {
			r.mismatch("packing score on %s %d, want %d", name, int(raw)%scoreBase, w)
		}
		scores = append(scores, fwk.NodeScore{Name: name, Score: raw})
	}
	if st := p.ScoreExtensions().NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
		r.mismatch("NormalizeScore: %v", st)
	}
	for _, ns := range scores {
		name, score := ns.Name, ns.Score
		if score%(fwk.MaxNodeScore/MaxPackingScore) != 0 {
			r.mismatch("Score on %s is %d, not the extender's score times %d", name, score, fwk.MaxNodeScore/MaxPackingScore)
		}
		packing := int(score / (fwk.MaxNodeScore / MaxPackingScore))
		if w, ok := want.Feasible[name]; ok && packing != w {
			r.mismatch("score on %s %d, want %d", name, packing, w)
		}
		switch {
		case score > bestScore:
			best, bestScore, tie = name, score, false
		case score == bestScore:
			tie = true
		}
	}
	if tie {
		r.mismatch("the highest score %d is shared: a tie-break would decide", bestScore/10)
	}
	if want.Chosen == nil || *want.Chosen != best {
		r.mismatch("chose %s, want %v", best, deref(want.Chosen))
	}
	if st := p.Reserve(ctx, state, pod, best); !st.IsSuccess() {
		r.mismatch("Reserve on %s: %v", best, st)
		p.Unreserve(ctx, state, pod, best)
		return
	}
	if st := p.Bind(ctx, state, pod, best); !st.IsSuccess() {
		r.mismatch("Bind: %v", st)
		p.Unreserve(ctx, state, pod, best)
		return
	}
	// The pod informer's update of the bound pod.
	bound, err := r.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		r.mismatch("reading the pod back: %v", err)
		return
	}
	p.ObservePod(bound)
	placement, err := ParsePlacement(bound.Annotations)
	if err != nil || placement == nil {
		r.mismatch("placement annotation %q: %v", bound.Annotations[PlacementAnnotation], err)
		return
	}
	r.checkPlacement(pod, placement, best, want.Placement)
	if held, ok := p.cache.Held(pod.UID); !ok || !held.Bound || held.LLCMask != placement.LLCMaskBits() || held.SlowFromPool != placement.SlowFromPool {
		r.mismatch("the cache holds %+v for the bound pod", held)
	}
}

// checkPlacement compares what the pod carries with the table's expectation and with what the
// pod asked for: its workload and objective, and its recommendation's id, ratio and plan.
func (r *conformanceRun) checkPlacement(pod *v1.Pod, got *Placement, node string, want *tablePlacement) {
	if want == nil {
		r.mismatch("placed on %s with no placement expected", node)
		return
	}
	c := got.Configuration
	if got.Node != node {
		r.mismatch("placement names %s, bound to %s", got.Node, node)
	}
	if c.VCPUs != want.VCPUs || c.DRAMBytes != want.DRAMBytes || c.SlowBytes != want.SlowBytes {
		r.mismatch("configuration %d vCPUs, %d DRAM, %d slow; want %d, %d, %d", c.VCPUs, c.DRAMBytes, c.SlowBytes, want.VCPUs, want.DRAMBytes, want.SlowBytes)
	}
	if got.LLCMask != want.LLCMask || c.LLCWays != UsedWays(got.LLCMaskBits()) {
		r.mismatch("LLC mask %s (%d ways), want %s", got.LLCMask, c.LLCWays, want.LLCMask)
	}
	if got.SlowFromPool != want.SlowFromPool {
		r.mismatch("slow from pool %v, want %v", got.SlowFromPool, want.SlowFromPool)
	}
	if (got.Fallback != nil) != want.Fallback {
		r.mismatch("fallback %v, want a fallback: %v", deref(got.Fallback), want.Fallback)
	}
	if got.Workload == nil && pod.Annotations[WorkloadAnnotation] != "" || got.Workload != nil && *got.Workload != pod.Annotations[WorkloadAnnotation] {
		r.mismatch("workload %v, the pod's is %q", deref(got.Workload), pod.Annotations[WorkloadAnnotation])
	}
	if got.Objective != podObjective(pod.Annotations) {
		r.mismatch("objective %q, the pod's is %q", got.Objective, podObjective(pod.Annotations))
	}
	rec := r.sc.recommendationFor(pod.Annotations)
	if want.Fallback || rec == nil {
		if got.RecommendationID != nil || len(got.Plan) != 0 || got.Configuration.SlowRatio != 0 {
			r.mismatch("a fallback carries a recommendation's id %v, plan %v or ratio %v", deref(got.RecommendationID), got.Plan, got.Configuration.SlowRatio)
		}
		return
	}
	if deref(got.RecommendationID) != rec.RecommendationID || float64(c.SlowRatio) != rec.SlowRatio || c.LLCWays != rec.LLCWays {
		r.mismatch("recommendation %v, ratio %v, %d ways; want %s, %v, %d", deref(got.RecommendationID), c.SlowRatio, c.LLCWays, rec.RecommendationID, rec.SlowRatio, rec.LLCWays)
	}
	if !reflect.DeepEqual(orEmptyPlan(got.Plan), orEmptyPlan(rec.Plan)) {
		r.mismatch("plan %v, want %v", got.Plan, rec.Plan)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func orEmptyPlan(p []StructurePlan) []StructurePlan {
	if p == nil {
		return []StructurePlan{}
	}
	return p
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// conformanceDoors are the engine's two front doors: every case runs through each.
var conformanceDoors = []string{"plugin", "extender"}

// runConformance runs the table through both front doors; cases counts each case once.
func runConformance(table conformanceTable) (int, []string) {
	cases := 0
	var mismatches []string
	for _, door := range conformanceDoors {
		cases = 0
		for i := range table.Scenarios {
			run := newConformanceRun(&table.Scenarios[i], door)
			cases += run.run()
			mismatches = append(mismatches, run.mismatches...)
		}
	}
	return cases, mismatches
}

// caughtByEveryDoor: each front door found a mismatch.
func caughtByEveryDoor(mismatches []string) bool {
	for _, door := range conformanceDoors {
		if !slices.ContainsFunc(mismatches, func(m string) bool { return strings.HasPrefix(m, "["+door+"]") }) {
			return false
		}
	}
	return true
}

func TestConformanceTable(t *testing.T) {
	table := loadConformanceTable(t)
	cases, mismatches := runConformance(table)
	for _, m := range mismatches {
		t.Error(m)
	}
	total := 0
	for _, sc := range table.Scenarios {
		total += len(sc.Steps)
	}
	if cases != total || cases <= 20 {
		t.Errorf("%d cases run of %d in the table (more than 20 expected)", cases, total)
	}
	t.Logf("%d cases in %d scenarios", cases, len(table.Scenarios))
}

// The suite cannot pass whatever the plugin does: each kind of expectation, made wrong, fails.
func TestConformanceCatchesAWrongExpectation(t *testing.T) {
	mutations := map[string]func(e *tableExpect){
		"chosen node": func(e *tableExpect) { other := "nowhere"; e.Chosen = &other },
		"score": func(e *tableExpect) {
			for n := range e.Feasible {
				e.Feasible[n]++
			}
		},
		"mask":           func(e *tableExpect) { e.Placement.LLCMask = "0x1" },
		"slow source":    func(e *tableExpect) { e.Placement.SlowFromPool = !e.Placement.SlowFromPool },
		"fallback":       func(e *tableExpect) { e.Placement.Fallback = !e.Placement.Fallback },
		"configuration":  func(e *tableExpect) { e.Placement.DRAMBytes++ },
		"reason":         func(e *tableExpect) { e.Never["fit-a"] = "cpus" },
		"reason class":   func(e *tableExpect) { e.Full["fit-a"] = e.Never["fit-a"]; delete(e.Never, "fit-a") },
		"feasible nodes": func(e *tableExpect) { delete(e.Feasible, "fit-b") },
	}
	for what, mutate := range mutations {
		table := loadConformanceTable(t)
		sc := &table.Scenarios[0]
		// fit/big-1: placed on fit-b, fit-a never (DRAM); fit-b feasible.
		step := sc.Steps[2]
		if step.Schedule == nil || step.Schedule.Name != "big-1" {
			t.Fatalf("the table's third step of %s is not big-1", sc.Name)
		}
		mutate(step.Expect)
		if _, mismatches := runConformance(conformanceTable{Scenarios: []conformanceScenario{*sc}}); !caughtByEveryDoor(mismatches) {
			t.Errorf("a wrong %s passed", what)
		}
	}
	// Placement as if there were no patterns: on patterns/web-1, the packing scores as the
	// scores and the node packing alone prefers as the chosen one; and a wrong packing score.
	patternMutations := map[string]func(e *tableExpect){
		"pattern ignored": func(e *tableExpect) {
			for n, s := range e.Packing {
				e.Feasible[n] = s
			}
			c := "pat-c"
			e.Chosen = &c
		},
		"packing score": func(e *tableExpect) { e.Packing["pat-c"]-- },
	}
	for what, mutate := range patternMutations {
		table := loadConformanceTable(t)
		var sc *conformanceScenario
		for i := range table.Scenarios {
			if table.Scenarios[i].Name == "patterns" {
				sc = &table.Scenarios[i]
			}
		}
		if sc == nil || sc.Steps[1].Schedule == nil || sc.Steps[1].Schedule.Name != "web-1" {
			t.Fatal("the table has no scenario patterns whose second step is web-1")
		}
		mutate(sc.Steps[1].Expect)
		_, mismatches := runConformance(conformanceTable{Scenarios: []conformanceScenario{*sc}})
		caught := caughtByEveryDoor(mismatches)
		if what == "packing score" {
			// The extender's wire carries only the combined score: the packing score alone is
			// checked at the plugin's Score (the same engine's RawScore).
			caught = slices.ContainsFunc(mismatches, func(m string) bool { return strings.HasPrefix(m, "[plugin]") })
		}
		if !caught {
			t.Errorf("a wrong expectation (%s) passed", what)
		}
	}
	// Skipped and refused pods, each expected to be judged like any pod instead.
	for _, kind := range []string{"skipped", "refused"} {
		table := loadConformanceTable(t)
		var sc *conformanceScenario
		for i := range table.Scenarios {
			if table.Scenarios[i].Name == "nodes-and-opt-in" {
				sc = &table.Scenarios[i]
			}
		}
		if sc == nil {
			t.Fatal("the table has no scenario nodes-and-opt-in")
		}
		for _, step := range sc.Steps {
			if e := step.Expect; e != nil && (kind == "skipped" && e.Skipped || kind == "refused" && e.Refused) {
				*e = tableExpect{Feasible: map[string]int{}}
			}
		}
		if _, mismatches := runConformance(conformanceTable{Scenarios: []conformanceScenario{*sc}}); !caughtByEveryDoor(mismatches) {
			t.Errorf("%s pods expected to be judged passed", kind)
		}
	}
}
