package tmc

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// BenchmarkFitAndScoreOver5000Nodes is Filter's and Score's per-node work for one pod over
// 5,000 nodes whose capacity is already parsed: the memo lookup, the fit and the score.
func BenchmarkFitAndScoreOver5000Nodes(b *testing.B) {
	e := &Engine{cache: NewCache()}
	nodes := make([]*v1.Node, 0, 5000)
	for i := 0; i < 5000; i++ {
		n := tmcNode(fmt.Sprintf("n%05d", i), 12, 24<<30, 128<<30, 48, "", 0)
		n.ResourceVersion = "7"
		e.ObserveNode(n)
		nodes = append(nodes, n)
	}
	ask := &PodAsk{OptedIn: true, VCPUs: 1, DRAMBytes: 1 << 30, SlowBytes: 1 << 30, LLCWays: 2}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, n := range nodes {
			if e.Fit(n, ask) == nil {
				_ = e.RawScore(n, ask)
			}
		}
	}
}
