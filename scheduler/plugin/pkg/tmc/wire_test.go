package tmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// The request bodies a real kube-scheduler v1.36.3 sent an extender, captured on the wire
// (tests/scheduler/wire): filter with full Node objects (nodeCacheCapable false), filter with node
// names (nodeCacheCapable true), and bind. They go through the extender's own HTTP handler and
// decoder, as captured and then with the pod opted in and the nodes publishing tiered capacity,
// so that the verbs are checked against the shapes the scheduler really sends.

func wireBody(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "tests", "scheduler", "wire", name+".request.json"))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// wireNodes are the four Node objects the captured filter-nodes request carries.
func wireNodes(t *testing.T) []*v1.Node {
	var args extenderv1.ExtenderArgs
	if err := json.Unmarshal(wireBody(t, "filter-nodes"), &args); err != nil || args.Nodes == nil {
		t.Fatalf("filter-nodes: %v", err)
	}
	nodes := make([]*v1.Node, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		nodes[i] = &args.Nodes.Items[i]
	}
	return nodes
}

// wireCapacity is what each captured node publishes once it is a tmc node: node-1 has too little
// DRAM for the pod ever, node-2 too few LLC ways, node-3 and node-4 fit with different room.
var wireCapacity = map[string]map[string]string{
	"node-1": {DRAMAnnotation: fmt.Sprint(256 << 20), LLCWaysAnnotation: "11"},
	"node-2": {DRAMAnnotation: fmt.Sprint(32 << 30), LLCWaysAnnotation: "2"},
	"node-3": {DRAMAnnotation: fmt.Sprint(8 << 30), LLCWaysAnnotation: "11"},
	"node-4": {DRAMAnnotation: fmt.Sprint(64 << 30), LLCWaysAnnotation: "11"},
}

const wireRecommendation = `{"schema":"tmc.recommendation/v1","workload":"probe","objective":"cheapest","recommendation_id":"r-1","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":4,"slow_ratio":0.0,"plan":[]}`

// edit decodes a captured body as generic JSON, changes it and encodes it again: every field
// the scheduler sent and the test does not touch is kept as it was.
func edit(t *testing.T, raw []byte, change func(body map[string]any)) []byte {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	change(body)
	out, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func object(t *testing.T, v any, path ...string) map[string]any {
	t.Helper()
	for _, key := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: not an object at %q", path, key)
		}
		if m[key] == nil {
			m[key] = map[string]any{}
		}
		v = m[key]
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v: not an object", path)
	}
	return m
}

// tiered opts the captured pod in: the tiered pod label, the opt-in resource on its container
// and a pinned recommendation on the pod.
func tiered(t *testing.T, raw []byte) []byte {
	return edit(t, raw, func(body map[string]any) {
		pod := object(t, body, "Pod")
		object(t, pod, "metadata", "labels")[v1alpha1.TieredPodLabel] = v1alpha1.TieredPodLabelValue
		object(t, pod, "metadata", "annotations")[RecommendationAnnotation] = wireRecommendation
		object(t, pod, "metadata", "annotations")[WorkloadAnnotation] = "probe"
		for _, c := range object(t, pod, "spec")["containers"].([]any) {
			object(t, c, "resources", "requests")[string(OptInResource)] = "1"
			// The pod's size, which its placement is given: the recommendation's own 1 GiB.
			object(t, c, "resources", "requests")["memory"] = "1Gi"
			object(t, c, "resources", "limits")[string(OptInResource)] = "1"
		}
		if list, ok := body["Nodes"].(map[string]any); ok {
			for _, n := range list["items"].([]any) {
				name := object(t, n, "metadata")["name"].(string)
				for k, v := range wireCapacity[name] {
					object(t, n, "metadata", "annotations")[k] = v
				}
			}
		}
	})
}

func tieredNodes(t *testing.T) []*v1.Node {
	nodes := wireNodes(t)
	for _, n := range nodes {
		n.Annotations = map[string]string{}
		for k, v := range wireCapacity[n.Name] {
			n.Annotations[k] = v
		}
	}
	return nodes
}

func post(t *testing.T, h http.Handler, verb string, body []byte, into any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/scheduler/"+verb, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: %d %s", verb, rec.Code, rec.Body.String())
	}
	if err := json.Unmarshal(rec.Body.Bytes(), into); err != nil {
		t.Fatalf("%s: the answer %s: %v", verb, rec.Body.String(), err)
	}
}

// kept is the node names a filter kept, in either form it answers.
func kept(out *extenderv1.ExtenderFilterResult) []string {
	var names []string
	if out.NodeNames != nil {
		names = append(names, *out.NodeNames...)
	}
	if out.Nodes != nil {
		for _, n := range out.Nodes.Items {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	return names
}

func TestWireCapturedRequestsDecode(t *testing.T) {
	var args extenderv1.ExtenderArgs
	for _, name := range []string{"filter-nodes", "filter-nodenames"} {
		if err := json.Unmarshal(wireBody(t, name), &args); err != nil || args.Pod == nil || args.Pod.Name != "probe-1" {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var bind extenderv1.ExtenderBindingArgs
	if err := json.Unmarshal(wireBody(t, "bind"), &bind); err != nil || bind.PodName != "probe-1" || bind.Node != "node-4" || bind.PodUID == "" {
		t.Fatalf("bind: %+v %v", bind, err)
	}
	if len(wireNodes(t)) != 4 {
		t.Fatal("filter-nodes carries other than four nodes")
	}
}

// As captured the pod does not opt in (it asks for another extended resource): both filter
// modes keep every node, each answered in the form it was asked.
func TestWireCapturedFiltersKeepAPodThatDoesNotOptIn(t *testing.T) {
	h := newExtenderHarness(t, wireNodes(t)...).ext.Handler("/scheduler")
	all := []string{"node-1", "node-2", "node-3", "node-4"}
	for _, name := range []string{"filter-nodes", "filter-nodenames"} {
		var out extenderv1.ExtenderFilterResult
		post(t, h, "filter", wireBody(t, name), &out)
		if out.Error != "" || !reflect.DeepEqual(kept(&out), all) || len(out.FailedNodes)+len(out.FailedAndUnresolvableNodes) != 0 {
			t.Fatalf("%s: %+v", name, out)
		}
		if (name == "filter-nodes") != (out.Nodes != nil) || (name == "filter-nodenames") != (out.NodeNames != nil) {
			t.Fatalf("%s: answered in the other form: %+v", name, out)
		}
		if out.Nodes != nil {
			// The very Node objects received, as kube-scheduler matches them.
			for i, n := range wireNodes(t) {
				if !reflect.DeepEqual(out.Nodes.Items[i], *n) {
					t.Fatalf("%s: node %s came back changed", name, n.Name)
				}
			}
		}
		var scores extenderv1.HostPriorityList
		post(t, h, "prioritize", wireBody(t, name), &scores)
		for _, s := range scores {
			if s.Score != 0 {
				t.Fatalf("%s: a pod tmc does not place is scored: %+v", name, scores)
			}
		}
	}
}

// Opted in, the two filter modes refuse the same nodes for the same reasons and keep the same
// ones, prioritize scores them alike, and the captured bind binds the pod with its placement.
func TestWireTieredPodThroughBothFilterModesAndBind(t *testing.T) {
	h := newExtenderHarness(t, tieredNodes(t)...)
	handler := h.ext.Handler("/scheduler")
	results := map[string]*extenderv1.ExtenderFilterResult{}
	scores := map[string]map[string]int64{}
	for _, name := range []string{"filter-nodes", "filter-nodenames"} {
		body := tiered(t, wireBody(t, name))
		var out extenderv1.ExtenderFilterResult
		post(t, handler, "filter", body, &out)
		if out.Error != "" {
			t.Fatalf("%s: %s", name, out.Error)
		}
		if got := kept(&out); !reflect.DeepEqual(got, []string{"node-3", "node-4"}) {
			t.Fatalf("%s: kept %v (%+v)", name, got, out)
		}
		if _, ok := out.FailedAndUnresolvableNodes["node-1"]; !ok {
			t.Errorf("%s: node-1 (too little DRAM) not refused for good: %+v", name, out)
		}
		if _, ok := out.FailedAndUnresolvableNodes["node-2"]; !ok {
			t.Errorf("%s: node-2 (too few ways) not refused for good: %+v", name, out)
		}
		results[name] = &out
		var list extenderv1.HostPriorityList
		post(t, handler, "prioritize", body, &list)
		scores[name] = map[string]int64{}
		for _, s := range list {
			scores[name][s.Host] = s.Score
		}
	}
	a, b := results["filter-nodes"], results["filter-nodenames"]
	if !reflect.DeepEqual(a.FailedNodes, b.FailedNodes) || !reflect.DeepEqual(a.FailedAndUnresolvableNodes, b.FailedAndUnresolvableNodes) {
		t.Fatalf("the modes refuse differently:\n%+v\n%+v", a, b)
	}
	if !reflect.DeepEqual(scores["filter-nodes"], scores["filter-nodenames"]) {
		t.Fatalf("the modes score differently: %v", scores)
	}
	for _, node := range []string{"node-3", "node-4"} {
		if s := scores["filter-nodes"][node]; s < 0 || s > extenderv1.MaxExtenderPriority {
			t.Fatalf("%s scored %d", node, s)
		}
	}
	if scores["filter-nodes"]["node-3"] == scores["filter-nodes"]["node-4"] {
		t.Errorf("two nodes with different room scored alike: %v", scores)
	}

	// The captured bind names probe-1 with its uid on node-4: the pod as the API server holds it.
	var bind extenderv1.ExtenderBindingArgs
	if err := json.Unmarshal(wireBody(t, "bind"), &bind); err != nil {
		t.Fatal(err)
	}
	var args extenderv1.ExtenderArgs
	if err := json.Unmarshal(tiered(t, wireBody(t, "filter-nodenames")), &args); err != nil {
		t.Fatal(err)
	}
	pod := args.Pod.DeepCopy()
	pod.UID = types.UID(bind.PodUID)
	pod.ResourceVersion = ""
	h.create(pod)
	var out extenderv1.ExtenderBindingResult
	post(t, handler, "bind", wireBody(t, "bind"), &out)
	if out.Error != "" {
		t.Fatalf("bind: %s", out.Error)
	}
	got, err := h.client.CoreV1().Pods(bind.PodNamespace).Get(context.Background(), bind.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	placement, err := ParsePlacement(got.Annotations)
	if err != nil || placement == nil || got.Spec.NodeName != "node-4" || placement.Node != "node-4" {
		t.Fatalf("bound to %q with placement %+v (%v)", got.Spec.NodeName, placement, err)
	}
	if placement.Configuration.DRAMBytes != 1<<30 || placement.Configuration.LLCWays != 4 || placement.Fallback != nil {
		t.Fatalf("the placement is not the recommendation's: %+v", placement)
	}
	if held, ok := h.engine.cache.Held(pod.UID); !ok || held.Node != "node-4" || !held.Bound {
		t.Fatalf("the cache holds %+v", held)
	}
}
