package tmc

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchNodes are n nodes as bench/scheduler_e2e.py registers them: half with a local slow tier,
// half on 384 GiB rack pools of 32 nodes, each already holding one reservation.
func benchNodes(e *Engine, n int) []*v1.Node {
	nodes := make([]*v1.Node, 0, n)
	for i := 0; i < n; i++ {
		var node *v1.Node
		if i%2 == 1 {
			node = tmcNode(fmt.Sprintf("n%05d", i), 12, 24<<30, 0, 48, fmt.Sprintf("rack-%d", i/64), 384<<30)
		} else {
			node = tmcNode(fmt.Sprintf("n%05d", i), 12, 24<<30, 128<<30, 48, "", 0)
		}
		node.ResourceVersion = "7"
		e.ObserveNode(node)
		capacity, cpus, _ := nodeCapacity(node)
		held := &PodAsk{OptedIn: true, VCPUs: 1, DRAMBytes: 1 << 30, SlowBytes: 2 << 30, LLCWays: 3}
		if _, err := e.cache.Assume(types.UID(fmt.Sprintf("held-%d", i)), node.Name, capacity, cpus, held); err != nil {
			panic(err)
		}
		nodes = append(nodes, node)
	}
	return nodes
}

// BenchmarkFitAndScore is Filter's and Score's per-node work for one pod over 5,000 and
// 20,000 nodes whose metadata is already parsed: the lookup, the fit and the score.
func BenchmarkFitAndScore(b *testing.B) {
	for _, size := range []int{5000, 20000} {
		b.Run(fmt.Sprint(size, "Nodes"), func(b *testing.B) {
			e := &Engine{cache: NewCache()}
			nodes := benchNodes(e, size)
			ask := &PodAsk{OptedIn: true, VCPUs: 1, DRAMBytes: 1 << 30, SlowBytes: 1 << 30, LLCWays: 2}
			pass := func() {
				for _, n := range nodes {
					if e.Fit(n, ask) == nil {
						_ = e.RawScore(n, ask)
					}
				}
			}
			pass() // parses every node once, as the first pod does
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				pass()
			}
		})
	}
}

// BenchmarkAskWithAPublishedRecommendation is a pod's ask read against a published
// recommendation with a plan of 8 structures: once per pod in PreFilter, and in each of the
// extender's filter, prioritize and bind.
func BenchmarkAskWithAPublishedRecommendation(b *testing.B) {
	index := NewRecommendationIndex()
	plan := make([]any, 8)
	for i := range plan {
		plan[i] = map[string]any{"tag": fmt.Sprintf("structure_%d", i), "fast_bytes": 1 << 28, "slow_bytes": 1 << 27}
	}
	index.Set("graph500-cheapest", map[string]any{
		"schema": RecommendationSchema, "workload": "graph500", "objective": "cheapest", "recommendation_id": "r-1",
		"dram_bytes": 2 << 30, "slow_bytes": 1 << 30, "llc_ways": 4, "slow_ratio": 0.3, "plan": plan,
	})
	pod := tieredPod("bfs", map[string]string{WorkloadAnnotation: "graph500"}, "1", "256Mi")
	b.ReportAllocs()
	for range b.N {
		ask, err := ReadPodWith(pod, index)
		if err != nil || ask.Fallback != nil {
			b.Fatal(err, *ask.Fallback)
		}
	}
}

// BenchmarkFitAndScoreParallel is the same work from parallel goroutines, as kube-scheduler
// runs Filter and Score (16 at a time): the lookups must not contend.
func BenchmarkFitAndScoreParallel(b *testing.B) {
	e := &Engine{cache: NewCache()}
	nodes := benchNodes(e, 5000)
	ask := &PodAsk{OptedIn: true, VCPUs: 1, DRAMBytes: 1 << 30, SlowBytes: 1 << 30, LLCWays: 2}
	for _, n := range nodes {
		_ = e.Fit(n, ask)
	}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			n := nodes[i%len(nodes)]
			if e.Fit(n, ask) == nil {
				_ = e.RawScore(n, ask)
			}
			i++
		}
	})
}
