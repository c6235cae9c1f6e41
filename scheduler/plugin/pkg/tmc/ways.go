package tmc

import "math/bits"

// LLC ways (model/packing.py). Intel CAT gives a class of service a *contiguous* capacity bitmask
// (bit i = way i), so a node's ways are not a count but a bitmask of the ways already handed out,
// and a request for w ways needs a free run of w adjacent bits. Runs are chosen best-fit: the
// shortest free run that holds w, at its low end, which keeps long runs whole for the wide
// requests that need them.

// Run is a run of free ways: its first way and its length.
type Run struct{ Start, Length int }

// RunMask is the mask of length ways starting at start.
func RunMask(start, length int) uint64 {
	if length >= 64 {
		return ^uint64(0) << start
	}
	return ((uint64(1) << length) - 1) << start
}

// IsContiguous says whether a mask is one non-empty run of ways: CAT rejects a mask with holes,
// and 0 is not a valid mask either.
func IsContiguous(mask uint64) bool {
	if mask == 0 {
		return false
	}
	low := mask & -mask
	return (mask+low)&mask == 0
}

// FreeRuns lists the free runs of a node's ways, lowest first.
func FreeRuns(used uint64, ways int) []Run {
	var runs []Run
	for r, next := nextFreeRun(used, ways, 0); r.Length > 0; r, next = nextFreeRun(used, ways, next) {
		runs = append(runs, r)
	}
	return runs
}

// nextFreeRun is the first free run at or after way from, and the way after it; a zero Run when
// there is none. It allocates nothing: Filter and Score look for runs on every node for every
// pod.
func nextFreeRun(used uint64, ways, from int) (Run, int) {
	if ways > 64 {
		ways = 64
	}
	if from >= ways {
		return Run{}, ways
	}
	// Free ways are the zero bits below ways; skip the used ones, then count the free ones.
	free := ^used >> from
	if ways-from < 64 {
		free &= (uint64(1) << (ways - from)) - 1
	}
	if free == 0 {
		return Run{}, ways
	}
	start := from + bits.TrailingZeros64(free)
	length := bits.TrailingZeros64(^(free >> (start - from)))
	return Run{start, length}, start + length
}

// UsedWays counts the ways a mask holds.
func UsedWays(used uint64) int { return bits.OnesCount64(used) }

// BestFitLength is the length of the run BestFitRun would cut need ways from, 0 when none
// holds them.
func BestFitLength(used uint64, ways, need int) int {
	best := 0
	for r, next := nextFreeRun(used, ways, 0); r.Length > 0; r, next = nextFreeRun(used, ways, next) {
		if r.Length >= need && (best == 0 || r.Length < best) {
			best = r.Length
		}
	}
	return best
}

// BestFitRun is the mask of need contiguous free ways cut from the low end of the shortest free
// run that holds them (the lowest such run on a tie); false when no run is long enough.
func BestFitRun(used uint64, ways, need int) (uint64, bool) {
	if need < 1 {
		return 0, false
	}
	found := Run{Length: 0}
	for _, r := range FreeRuns(used, ways) {
		if r.Length >= need && (found.Length == 0 || r.Length < found.Length) {
			found = r
		}
	}
	if found.Length == 0 {
		return 0, false
	}
	return RunMask(found.Start, need), true
}

// LongestFreeRun is the mask of every way of the longest free run (the lowest on a tie): what a
// pod without a recommendation is given, as the extender's fallback does.
func LongestFreeRun(used uint64, ways int) (uint64, bool) {
	found := Run{Length: 0}
	for _, r := range FreeRuns(used, ways) {
		if r.Length > found.Length {
			found = r
		}
	}
	if found.Length == 0 {
		return 0, false
	}
	return RunMask(found.Start, found.Length), true
}
