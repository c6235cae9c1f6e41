package tmc

import "math"

// The packing score: the engine's only copy, so the plugin's Score and the extender's prioritize
// rank nodes alike. For a node and a configuration placed on it, with u_r the node's
// utilization of resource r *after* the placement, over the resources the node has (CPU, DRAM,
// LLC ways, and slow memory when it has a slow tier: its own or its rack pool's):
//
//	fill      = mean_r u_r                         dense packing: fuller nodes first
//	imbalance = max_r u_r - min_r u_r              stranding: one resource full, another idle
//	cat_waste = (best-fit run length - w) / ways   ways left in the chosen run, cut off from others
//	raw       = fill - 0.5 * imbalance - 0.5 * cat_waste                   in [-1, 1]
//	score     = round_half_even(10 * clip((raw + 1) / 2, 0, 1))
//
// Halves round to even, as the score's first definition (Python's round()) did: the recorded
// scores of score_test.go and the conformance table's expected scores were computed that way,
// and rounding a tie the other way would move a node by one point and change where pods go.

const (
	// MaxPackingScore is the extender's scale (kube-scheduler's MaxExtenderPriority).
	MaxPackingScore = 10
	imbalanceWeight = 0.5
	catWasteWeight  = 0.5
)

// NodeLoad is one node's capacity and what is already reserved on it. Slow memory is the node's
// own or, for a pooled node, its rack pool's (capacity and reservations of the whole pool).
type NodeLoad struct {
	CPUs          float64
	DRAMBytes     float64
	SlowBytes     float64
	LLCWays       int
	UsedCPUs      float64
	UsedDRAMBytes float64
	UsedSlowBytes float64
	LLCUsedMask   uint64
}

// Ask is what a configuration takes from a node.
type Ask struct {
	VCPUs     float64
	DRAMBytes float64
	SlowBytes float64
	LLCWays   int
}

// PackingScore is the score 0..MaxPackingScore of placing ask on node; 0 if it does not fit.
func PackingScore(node NodeLoad, ask Ask) int {
	run := BestFitLength(node.LLCUsedMask, node.LLCWays, ask.LLCWays)
	if run == 0 {
		return 0
	}
	// An array, not a slice: Score runs on every node for every pod, and allocates nothing.
	shares := [4]float64{
		(node.UsedCPUs + ask.VCPUs) / node.CPUs,
		(node.UsedDRAMBytes + ask.DRAMBytes) / node.DRAMBytes,
		float64(UsedWays(node.LLCUsedMask)+ask.LLCWays) / float64(node.LLCWays),
	}
	n := 3
	if node.SlowBytes > 0 {
		shares[n] = (node.UsedSlowBytes + ask.SlowBytes) / node.SlowBytes
		n++
	}
	// Plain comparisons: math.Min and math.Max, which also order NaNs and signed zeros, were a
	// tenth of Score's time, and the shares here are finite.
	lo, hi, sum := shares[0], shares[0], 0.0
	for _, s := range shares[:n] {
		if s < lo {
			lo = s
		}
		if s > hi {
			hi = s
		}
		sum += s
	}
	if hi > 1.0 {
		return 0
	}
	fill := sum / float64(n)
	waste := float64(run-ask.LLCWays) / float64(node.LLCWays)
	raw := fill - imbalanceWeight*(hi-lo) - catWasteWeight*waste
	clipped := (raw + 1.0) / 2.0
	if clipped < 0.0 {
		clipped = 0.0
	} else if clipped > 1.0 {
		clipped = 1.0
	}
	return int(math.RoundToEven(MaxPackingScore * clipped))
}
