package tmc

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// BenchmarkExtenderVerbsOver500Nodes is the extender's side of one pod's scheduling cycle as
// kube-scheduler calls it at 5,000 nodes (nodeCacheCapable: the 500 feasible names it found,
// its default share of nodes to score): filter then prioritize, each a JSON body decoded and
// an answer encoded through the verbs' handler (no network, no TLS). What the extender process
// spends per pod beyond this is its informers, TLS and the bind.
func BenchmarkExtenderVerbsOver500Nodes(b *testing.B) {
	e := &Engine{cache: NewCache()}
	nodes := benchNodes(e, 5000)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	names := make([]string, 0, 500)
	for i, n := range nodes {
		_ = indexer.Add(n)
		if i%10 == 0 {
			names = append(names, n.Name)
		}
	}
	ext := NewExtender(e, nil, corelisters.NewNodeLister(indexer), ExtenderOptions{})
	handler := ext.Handler("/scheduler")
	pod := tieredPod("bfs", map[string]string{WorkloadAnnotation: "graph500",
		RecommendationAnnotation: `{"schema":"tmc.recommendation/v1","dram_bytes":1073741824,"slow_bytes":1073741824,"llc_ways":2,"slow_ratio":0.5}`},
		"1", "256Mi")
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		b.Fatal(err)
	}
	call := func(verb string) {
		r := httptest.NewRequest(http.MethodPost, "/scheduler/"+verb, bytes.NewReader(body))
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", verb, w.Code, w.Body.String())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		call("filter")
		call("prioritize")
	}
}
