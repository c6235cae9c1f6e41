package tmc

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// verb posts body to the extender's verb as kube-scheduler does (JSON, PascalCase envelope) and
// decodes its answer into out; false when it did not answer 200.
func (r *conformanceRun) verb(name string, body, out any) bool {
	raw, err := json.Marshal(body)
	if err != nil {
		r.mismatch("%s: encoding the request: %v", name, err)
		return false
	}
	rec := httptest.NewRecorder()
	r.ext.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/scheduler/"+name, bytes.NewReader(raw)))
	if rec.Code != http.StatusOK {
		r.mismatch("%s: HTTP %d: %s", name, rec.Code, rec.Body.String())
		return false
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		r.mismatch("%s: the answer %q: %v", name, rec.Body.String(), err)
		return false
	}
	return true
}

// attemptExtender is attempt through the extender's verbs: filter (with the node names, as a
// nodeCacheCapable scheduler sends them), prioritize over the nodes that passed, the highest
// score chosen, then bind.
func (r *conformanceRun) attemptExtender(pod *v1.Pod, want *tableExpect) {
	ctx := context.Background()
	if want == nil {
		r.mismatch("no expectation")
		return
	}
	names := append([]string(nil), r.order...)
	var filtered extenderv1.ExtenderFilterResult
	if !r.verb("filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names}, &filtered) {
		return
	}
	bind := func(node string) string {
		var out extenderv1.ExtenderBindingResult
		args := extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node}
		if !r.verb("bind", args, &out) {
			return "no answer"
		}
		return out.Error
	}
	_, heldBefore := r.plugin.cache.Held(pod.UID)
	if want.Skipped {
		// Such a pod never reaches the extender (managedResources); if it did, every node is
		// kept and bind refuses it.
		if filtered.NodeNames == nil || len(*filtered.NodeNames) != len(names) || filtered.Error != "" {
			r.mismatch("filter of a pod that is not tmc's: %+v", filtered)
		}
		if e := bind(r.order[0]); e == "" {
			r.mismatch("bind of a pod that is not tmc's succeeded")
		}
		if _, held := r.plugin.cache.Held(pod.UID); held && !heldBefore {
			r.mismatch("a skipped pod holds a reservation")
		}
		return
	}
	if want.Refused {
		if len(filtered.FailedAndUnresolvableNodes) != len(names) || (filtered.NodeNames != nil && len(*filtered.NodeNames) > 0) {
			r.mismatch("filter of a refused pod: %+v, want every node unresolvable", filtered)
		}
		if _, held := r.plugin.cache.Held(pod.UID); held {
			r.mismatch("a refused pod holds a reservation")
		}
		return
	}
	// The contract of the filter's Error: set exactly when no node fits now but some node is
	// only full (kube-scheduler then tries the pod again on its backoff).
	fullOnly := len(*orEmptyNames(filtered.NodeNames)) == 0 && len(filtered.FailedNodes) > 0
	if (filtered.Error != "") != fullOnly || (fullOnly && !strings.HasPrefix(filtered.Error, FullNowPrefix)) || filtered.NodeNames == nil {
		r.mismatch("filter: %+v", filtered)
		return
	}
	feasible := map[string]bool{}
	for _, n := range *filtered.NodeNames {
		feasible[n] = true
	}
	full, never := map[string]string{}, map[string]string{}
	for n, msg := range filtered.FailedNodes {
		full[n] = reasonCode(msg, r.nodes[n])
	}
	for n, msg := range filtered.FailedAndUnresolvableNodes {
		never[n] = reasonCode(msg, r.nodes[n])
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
	if len(feasible) == 0 {
		if want.Chosen != nil {
			r.mismatch("no node fits, want %s", *want.Chosen)
		}
		if _, held := r.plugin.cache.Held(pod.UID); held {
			r.mismatch("a pod no node fits holds a reservation")
		}
		return
	}
	kept := sortedKeys(feasible)
	var scores extenderv1.HostPriorityList
	if !r.verb("prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &kept}, &scores) {
		return
	}
	best, bestScore, tie := "", int64(-1), false
	for _, hp := range scores {
		if w, ok := want.Feasible[hp.Host]; ok && int(hp.Score) != w {
			r.mismatch("score on %s %d, want %d", hp.Host, hp.Score, w)
		}
		switch {
		case hp.Score > bestScore:
			best, bestScore, tie = hp.Host, hp.Score, false
		case hp.Score == bestScore:
			tie = true
		}
	}
	if len(scores) != len(kept) {
		r.mismatch("prioritize scored %d nodes of %d", len(scores), len(kept))
	}
	if tie {
		r.mismatch("the highest score %d is shared: a tie-break would decide", bestScore)
	}
	if want.Chosen == nil || *want.Chosen != best {
		r.mismatch("chose %s, want %v", best, deref(want.Chosen))
	}
	if e := bind(best); e != "" {
		r.mismatch("bind: %s", e)
		return
	}
	bound, err := r.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		r.mismatch("reading the pod back: %v", err)
		return
	}
	r.plugin.ObservePod(bound) // the pod informer's update
	placement, err := ParsePlacement(bound.Annotations)
	if err != nil || placement == nil || bound.Spec.NodeName != best {
		r.mismatch("bound to %q with placement %q: %v", bound.Spec.NodeName, bound.Annotations[PlacementAnnotation], err)
		return
	}
	r.checkPlacement(pod, placement, best, want.Placement)
	if held, ok := r.plugin.cache.Held(pod.UID); !ok || !held.Bound || held.LLCMask != placement.LLCMaskBits() || held.SlowFromPool != placement.SlowFromPool {
		r.mismatch("the cache holds %+v for the bound pod", held)
	}
}

func orEmptyNames(names *[]string) *[]string {
	if names == nil {
		return &[]string{}
	}
	return names
}
