package tmc

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// For every mask of a 6-way node: the best-fit run for each need 1..6 (-1: none), as
// model/packing.py's best_fit_run computes it (the rebalancer and the planning benchmark use that
// copy), and the run the fallback takes (every way of the longest free run, lowest on a tie; -1:
// none), recorded from the Python rule the engine's fallback replaced.
var pythonRuns = []struct {
	used    uint64
	fits    [6]int64
	longest int64
}{
	{0x00, [6]int64{1, 3, 7, 15, 31, 63}, 63},
	{0x01, [6]int64{2, 6, 14, 30, 62, -1}, 62},
	{0x02, [6]int64{1, 12, 28, 60, -1, -1}, 60},
	{0x03, [6]int64{4, 12, 28, 60, -1, -1}, 60},
	{0x04, [6]int64{1, 3, 56, -1, -1, -1}, 56},
	{0x05, [6]int64{2, 24, 56, -1, -1, -1}, 56},
	{0x06, [6]int64{1, 24, 56, -1, -1, -1}, 56},
	{0x07, [6]int64{8, 24, 56, -1, -1, -1}, 56},
	{0x08, [6]int64{16, 48, 7, -1, -1, -1}, 7},
	{0x09, [6]int64{2, 6, -1, -1, -1, -1}, 6},
	{0x0a, [6]int64{1, 48, -1, -1, -1, -1}, 48},
	{0x0b, [6]int64{4, 48, -1, -1, -1, -1}, 48},
	{0x0c, [6]int64{1, 3, -1, -1, -1, -1}, 3},
	{0x0d, [6]int64{2, 48, -1, -1, -1, -1}, 48},
	{0x0e, [6]int64{1, 48, -1, -1, -1, -1}, 48},
	{0x0f, [6]int64{16, 48, -1, -1, -1, -1}, 48},
	{0x10, [6]int64{32, 3, 7, 15, -1, -1}, 15},
	{0x11, [6]int64{32, 6, 14, -1, -1, -1}, 14},
	{0x12, [6]int64{1, 12, -1, -1, -1, -1}, 12},
	{0x13, [6]int64{32, 12, -1, -1, -1, -1}, 12},
	{0x14, [6]int64{8, 3, -1, -1, -1, -1}, 3},
	{0x15, [6]int64{2, -1, -1, -1, -1, -1}, 2},
	{0x16, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x17, [6]int64{8, -1, -1, -1, -1, -1}, 8},
	{0x18, [6]int64{32, 3, 7, -1, -1, -1}, 7},
	{0x19, [6]int64{32, 6, -1, -1, -1, -1}, 6},
	{0x1a, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x1b, [6]int64{4, -1, -1, -1, -1, -1}, 4},
	{0x1c, [6]int64{32, 3, -1, -1, -1, -1}, 3},
	{0x1d, [6]int64{2, -1, -1, -1, -1, -1}, 2},
	{0x1e, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x1f, [6]int64{32, -1, -1, -1, -1, -1}, 32},
	{0x20, [6]int64{1, 3, 7, 15, 31, -1}, 31},
	{0x21, [6]int64{2, 6, 14, 30, -1, -1}, 30},
	{0x22, [6]int64{1, 12, 28, -1, -1, -1}, 28},
	{0x23, [6]int64{4, 12, 28, -1, -1, -1}, 28},
	{0x24, [6]int64{1, 3, -1, -1, -1, -1}, 3},
	{0x25, [6]int64{2, 24, -1, -1, -1, -1}, 24},
	{0x26, [6]int64{1, 24, -1, -1, -1, -1}, 24},
	{0x27, [6]int64{8, 24, -1, -1, -1, -1}, 24},
	{0x28, [6]int64{16, 3, 7, -1, -1, -1}, 7},
	{0x29, [6]int64{16, 6, -1, -1, -1, -1}, 6},
	{0x2a, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x2b, [6]int64{4, -1, -1, -1, -1, -1}, 4},
	{0x2c, [6]int64{16, 3, -1, -1, -1, -1}, 3},
	{0x2d, [6]int64{2, -1, -1, -1, -1, -1}, 2},
	{0x2e, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x2f, [6]int64{16, -1, -1, -1, -1, -1}, 16},
	{0x30, [6]int64{1, 3, 7, 15, -1, -1}, 15},
	{0x31, [6]int64{2, 6, 14, -1, -1, -1}, 14},
	{0x32, [6]int64{1, 12, -1, -1, -1, -1}, 12},
	{0x33, [6]int64{4, 12, -1, -1, -1, -1}, 12},
	{0x34, [6]int64{8, 3, -1, -1, -1, -1}, 3},
	{0x35, [6]int64{2, -1, -1, -1, -1, -1}, 2},
	{0x36, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x37, [6]int64{8, -1, -1, -1, -1, -1}, 8},
	{0x38, [6]int64{1, 3, 7, -1, -1, -1}, 7},
	{0x39, [6]int64{2, 6, -1, -1, -1, -1}, 6},
	{0x3a, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x3b, [6]int64{4, -1, -1, -1, -1, -1}, 4},
	{0x3c, [6]int64{1, 3, -1, -1, -1, -1}, 3},
	{0x3d, [6]int64{2, -1, -1, -1, -1, -1}, 2},
	{0x3e, [6]int64{1, -1, -1, -1, -1, -1}, 1},
	{0x3f, [6]int64{-1, -1, -1, -1, -1, -1}, -1},
}

func TestWayRunsMatchPython(t *testing.T) {
	for _, c := range pythonRuns {
		for need := 1; need <= 6; need++ {
			got, ok := BestFitRun(c.used, 6, need)
			want := c.fits[need-1]
			if (want < 0) == ok || (ok && got != uint64(want)) {
				t.Errorf("BestFitRun(%#x, 6, %d) = %#x, %v; Python says %d", c.used, need, got, ok, want)
			}
			if length := BestFitLength(c.used, 6, need); ok && length < need || !ok && length != 0 {
				t.Errorf("BestFitLength(%#x, 6, %d) = %d disagrees with BestFitRun", c.used, need, length)
			}
		}
		got, ok := LongestFreeRun(c.used, 6)
		if (c.longest < 0) == ok || (ok && got != uint64(c.longest)) {
			t.Errorf("LongestFreeRun(%#x, 6) = %#x, %v; Python says %d", c.used, got, ok, c.longest)
		}
	}
}

func TestContiguousMasks(t *testing.T) {
	for mask, want := range map[uint64]bool{0: false, 1: true, 0xf0: true, 0x5: false, 0x7ff: true, ^uint64(0): true, 1 << 63: true, 0x8000000000000001: false} {
		if IsContiguous(mask) != want {
			t.Errorf("IsContiguous(%#x) = %v", mask, !want)
		}
	}
	if RunMask(0, 64) != ^uint64(0) || RunMask(3, 2) != 0x18 {
		t.Errorf("RunMask: %#x %#x", RunMask(0, 64), RunMask(3, 2))
	}
	// A 64-way node: the longest run of a full-width free mask is every way.
	if got, ok := LongestFreeRun(0, 64); !ok || got != ^uint64(0) {
		t.Errorf("LongestFreeRun(0, 64) = %#x, %v", got, ok)
	}
	if _, ok := BestFitRun(0, 8, 0); ok {
		t.Error("a mask of zero ways was handed out")
	}
}

// naiveFreeRuns is the way-by-way scan FreeRuns must agree with.
func naiveFreeRuns(used uint64, ways int) []Run {
	var runs []Run
	start := -1
	for way := 0; way <= ways; way++ {
		free := way < ways && (used>>way)&1 == 0
		if free && start < 0 {
			start = way
		} else if !free && start >= 0 {
			runs = append(runs, Run{start, way - start})
			start = -1
		}
	}
	return runs
}

func TestFreeRunsAgreeWithAWayByWayScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 33))
	masks := []uint64{0, ^uint64(0), 1, 1 << 63, 0x5555555555555555, 0x00ff00ff00ff00ff}
	for range 2000 {
		masks = append(masks, rng.Uint64()&rng.Uint64())
	}
	for _, used := range masks {
		for _, ways := range []int{1, 2, 11, 20, 47, 48, 63, 64} {
			got, want := FreeRuns(used, ways), naiveFreeRuns(used, ways)
			if !slices.Equal(got, want) {
				t.Fatalf("FreeRuns(%#x, %d) = %v, want %v", used, ways, got, want)
			}
			for need := 1; need <= ways; need += 5 {
				best := 0
				for _, r := range want {
					if r.Length >= need && (best == 0 || r.Length < best) {
						best = r.Length
					}
				}
				if got := BestFitLength(used, ways, need); got != best {
					t.Fatalf("BestFitLength(%#x, %d, %d) = %d, want %d", used, ways, need, got, best)
				}
			}
		}
	}
}
