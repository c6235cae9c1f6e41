package tmc

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// schedulingParallelism is kube-scheduler's default parallelism: Filter and Score of one pod run
// on this many goroutines, whatever GOMAXPROCS is.
const schedulingParallelism = 16

// chunkFor is kube-scheduler's chunk size for pieces spread over its goroutines.
func chunkFor(pieces int) int {
	s := int(math.Sqrt(float64(pieces)))
	if r := pieces/schedulingParallelism + 1; s > r {
		s = r
	}
	return max(s, 1)
}

// BenchmarkSchedulingCycle is one tiered pod's work in the engine as kube-scheduler drives it
// (one op per pod): Filter on 16 goroutines over the nodes from where the previous pod stopped
// until it has the nodes it scores (10 % of 5,000, 5 % of 20,000), Score of those on 16
// goroutines, then Reserve on the best and, as its binding cycle and a later deletion do, the
// reservation dropped again. Each pod judges other nodes than the one before, so the nodes'
// records are as cold as kube-scheduler's round robin leaves them. Run it with -cpu 2 for the
// two cores of the measuring machine.
func BenchmarkSchedulingCycle(b *testing.B) {
	for _, size := range []struct{ nodes, find int }{{5000, 500}, {20000, 1000}} {
		b.Run(fmt.Sprint(size.nodes, "Nodes"), func(b *testing.B) {
			e := &Engine{cache: NewCache()}
			nodes := benchNodes(e, size.nodes)
			ask := &PodAsk{OptedIn: true, VCPUs: 1, DRAMBytes: 1 << 30, SlowBytes: 1 << 30, LLCWays: 2}
			for _, n := range nodes {
				_ = e.Fit(n, ask) // parses every node once, as the first pod does
			}
			feasible := make([]*v1.Node, size.find)
			scores := make([]int, size.find)
			start := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				var found, processed atomic.Int32
				ctx, cancel := context.WithCancel(context.Background())
				workqueue.ParallelizeUntil(ctx, schedulingParallelism, len(nodes), func(j int) {
					processed.Add(1)
					n := nodes[(start+j)%len(nodes)]
					if e.Fit(n, ask) != nil {
						return
					}
					if k := found.Add(1); k > int32(size.find) {
						cancel()
						found.Add(-1)
					} else {
						feasible[k-1] = n
					}
				}, workqueue.WithChunkSize(chunkFor(len(nodes))))
				cancel()
				start = (start + int(processed.Load())) % len(nodes)
				count := int(found.Load())
				workqueue.ParallelizeUntil(context.Background(), schedulingParallelism, count, func(j int) {
					scores[j] = e.RawScore(feasible[j], ask)
				}, workqueue.WithChunkSize(chunkFor(count)))
				best := 0
				for j := range count {
					if scores[j] > scores[best] {
						best = j
					}
				}
				uid := types.UID(fmt.Sprint("pod-", i))
				if _, err := e.Reserve(uid, feasible[best], ask); err != nil {
					b.Fatal(err)
				}
				e.cache.Release(uid)
			}
		})
	}
}
