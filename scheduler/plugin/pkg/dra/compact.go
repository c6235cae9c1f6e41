package dra

import (
	"fmt"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Run is a contiguous run of LLC ways: Count ways from First (a CAT mask).
type Run struct {
	First int `json:"first"`
	Count int `json:"count"`
}

// Mask is the run's CAT mask.
func (r Run) Mask() uint64 {
	if r.Count >= 64 {
		return ^uint64(0)
	}
	return (uint64(1)<<r.Count - 1) << r.First
}

// Compaction is where the node's groups go so that a new one of Count ways fits: Held[i] is
// the new run of the i-th held group (the same run when it stays), New the new group's run,
// Moved how many held groups change place (each a rewrite of its resctrl schemata).
type Compaction struct {
	Held  []Run
	New   Run
	Moved int
}

// Compact turns a count of ways into a mask on a node of `ways` ways whose resctrl groups hold
// the runs `held`: the new group's run, and the held groups' runs after the fewest moves. It is
// the rule a node applies to a DRA allocation, which grants a count of ways and no position
// (see the package doc).
//
// The groups keep their order; the new run goes into a gap between two neighbours (or at
// either end), made wide enough by sliding the groups below it down and those above it up, each
// packed against the next group that stays. Every gap and every choice of which neighbours
// slide is tried, and the one that moves the fewest groups is taken (then the lowest new run).
// Moving every group down to way 0 leaves all free ways in one run at the top, so whenever the
// held and the new ways together fit in the node a compaction exists. Groups are never moved
// out of order: a layout that only a reordering would free with fewer moves is not found.
//
// An error when the runs overlap, leave the node, or the ways do not fit.
func Compact(ways int, held []Run, count int) (Compaction, error) {
	if ways < 1 || ways > v1alpha1.MaxLLCWays {
		return Compaction{}, fmt.Errorf("a node has 1..%d ways, not %d", v1alpha1.MaxLLCWays, ways)
	}
	if count < 1 {
		return Compaction{}, fmt.Errorf("a group takes at least 1 way, not %d", count)
	}
	order, used, err := sortedRuns(ways, held)
	if err != nil {
		return Compaction{}, err
	}
	if used+count > ways {
		return Compaction{}, fmt.Errorf("%d ways held and %d asked do not fit in %d", used, count, ways)
	}
	g := make([]Run, len(order)) // the held runs by position
	for i, k := range order {
		g[i] = held[k]
	}
	m := len(g)
	best, found := Compaction{}, false
	// The gap goes after the s lowest groups; the top `down` of those slide down, the bottom
	// `up` of the others slide up.
	for s := 0; s <= m; s++ {
		for down := 0; down <= s; down++ {
			for up := 0; up <= m-s; up++ {
				placed, low, high := slid(ways, g, s, down, up)
				if high-low < count {
					continue
				}
				moved := 0
				for i := range g {
					if placed[i] != g[i] {
						moved++
					}
				}
				if found && (moved > best.Moved || (moved == best.Moved && low >= best.New.First)) {
					continue
				}
				best, found = Compaction{Held: placed, New: Run{First: low, Count: count}, Moved: moved}, true
			}
		}
	}
	// Back in the caller's order.
	out := make([]Run, len(held))
	for i, k := range order {
		out[k] = best.Held[i]
	}
	best.Held = out
	return best, nil
}

// slid is the runs g (by position) with the top `down` of the s lowest packed down against the
// highest one that stays (or way 0), and the bottom `up` of the rest packed up against the
// lowest one that stays (or the top); low..high is the free gap between the two parts.
func slid(ways int, g []Run, s, down, up int) ([]Run, int, int) {
	placed := append([]Run(nil), g...)
	low := 0
	if s-down > 0 {
		low = g[s-down-1].First + g[s-down-1].Count
	}
	for i := s - down; i < s; i++ {
		placed[i].First = low
		low += g[i].Count
	}
	high := ways
	if s+up < len(g) {
		high = g[s+up].First
	}
	for i := s + up - 1; i >= s; i-- {
		high -= g[i].Count
		placed[i].First = high
	}
	return placed, low, high
}

// sortedRuns checks the runs lie in the node without overlapping and returns their indices by
// position and the ways they hold.
func sortedRuns(ways int, held []Run) ([]int, int, error) {
	order := make([]int, len(held))
	var mask uint64
	used := 0
	for i, r := range held {
		if r.Count < 1 || r.First < 0 || r.First+r.Count > ways {
			return nil, 0, fmt.Errorf("held run %d (%d ways from way %d) is not within the node's %d ways", i, r.Count, r.First, ways)
		}
		if mask&r.Mask() != 0 {
			return nil, 0, fmt.Errorf("held run %d (%d ways from way %d) overlaps another", i, r.Count, r.First)
		}
		mask |= r.Mask()
		used += r.Count
		order[i] = i
	}
	for i := 1; i < len(order); i++ { // insertion sort: at most 64 runs
		for j := i; j > 0 && held[order[j]].First < held[order[j-1]].First; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	return order, used, nil
}
