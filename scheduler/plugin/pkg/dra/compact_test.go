package dra

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

func TestCompactMovesAsFewGroupsAsItCan(t *testing.T) {
	for _, c := range []struct {
		name  string
		ways  int
		held  []Run
		count int
		want  []Run
		new   Run
		moved int
	}{
		{"an empty node", 48, nil, 12, []Run{}, Run{0, 12}, 0},
		{"the gap above", 48, []Run{{0, 12}}, 12, []Run{{0, 12}}, Run{12, 12}, 0},
		{"the lowest gap that fits", 16, []Run{{2, 4}, {10, 2}}, 2, []Run{{2, 4}, {10, 2}}, Run{0, 2}, 0},
		{"a gap below the groups", 12, []Run{{4, 8}}, 4, []Run{{4, 8}}, Run{0, 4}, 0},
		// 4 free ways in two gaps of 2: one group moves (up, as the new run then lies lowest).
		{"one of two moves", 12, []Run{{2, 4}, {8, 4}}, 4, []Run{{4, 4}, {8, 4}}, Run{0, 4}, 1},
		// Free 0-1, 5-6, 10-11: one group moves, not both.
		{"one of two moves, again", 12, []Run{{2, 3}, {7, 3}}, 4, []Run{{4, 3}, {7, 3}}, Run{0, 4}, 1},
		// Free 2-3 and 6-7: the middle group moves up, and the new run lies at the lowest place.
		{"the middle one moves", 12, []Run{{0, 2}, {4, 2}, {8, 4}}, 4, []Run{{0, 2}, {6, 2}, {8, 4}}, Run{2, 4}, 1},
		// Free 0 and 11: only sliding the whole run of groups frees two ways together.
		{"all slide", 12, []Run{{1, 5}, {6, 5}}, 2, []Run{{2, 5}, {7, 5}}, Run{0, 2}, 2},
		// The fewest moves, not the nearest: ways 0, 3, 6, 9 free; three groups in the way.
		{"three of four", 12, []Run{{1, 2}, {4, 2}, {7, 2}, {10, 2}}, 4,
			[]Run{{4, 2}, {6, 2}, {8, 2}, {10, 2}}, Run{0, 4}, 3},
		{"the last free way", 8, []Run{{0, 3}, {4, 4}}, 1, []Run{{0, 3}, {4, 4}}, Run{3, 1}, 0},
		{"a full node after packing", 8, []Run{{1, 3}, {5, 2}}, 3, []Run{{3, 3}, {6, 2}}, Run{0, 3}, 2},
		{"the whole of a 64-way node", 64, nil, 64, []Run{}, Run{0, 64}, 0},
		{"given out of order", 12, []Run{{8, 4}, {2, 4}}, 4, []Run{{8, 4}, {4, 4}}, Run{0, 4}, 1},
	} {
		got, err := Compact(c.ways, c.held, c.count)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if fmt.Sprint(got.Held) != fmt.Sprint(c.want) || got.New != c.new || got.Moved != c.moved {
			t.Errorf("%s: %v, new %v, %d moved; want %v, new %v, %d moved", c.name, got.Held, got.New, got.Moved, c.want, c.new, c.moved)
		}
	}
}

func TestCompactRefusesWhatCannotBe(t *testing.T) {
	for _, c := range []struct {
		reason string
		ways   int
		held   []Run
		count  int
	}{
		{"do not fit in 12", 12, []Run{{0, 4}, {6, 4}}, 5},
		{"overlaps another", 12, []Run{{0, 4}, {3, 2}}, 1},
		{"not within the node", 12, []Run{{10, 4}}, 1},
		{"not within the node", 12, []Run{{-1, 2}}, 1},
		{"not within the node", 12, []Run{{2, 0}}, 1},
		{"at least 1 way", 12, nil, 0},
		{"1..64 ways", 65, nil, 1},
	} {
		if _, err := Compact(c.ways, c.held, c.count); err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%d ways, %v, %d: %v, want %q", c.ways, c.held, c.count, err, c.reason)
		}
	}
}

// Whatever the layout, a count the node's free ways hold always gets a run, and the result is
// a layout: every run in the node, none overlapping, each group its own size.
func TestACountThatFitsAlwaysGetsARun(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for trial := 0; trial < 2000; trial++ {
		ways := 1 + r.Intn(64)
		var held []Run
		for w := 0; w < ways; {
			n := 1 + r.Intn(6)
			if w+n <= ways && r.Intn(2) == 0 {
				held = append(held, Run{w, n})
			}
			w += n
		}
		used := 0
		for _, h := range held {
			used += h.Count
		}
		if used == ways {
			continue
		}
		count := 1 + r.Intn(ways-used)
		got, err := Compact(ways, held, count)
		if err != nil {
			t.Fatalf("%d ways, %v, %d: %v", ways, held, count, err)
		}
		all := append(append([]Run(nil), got.Held...), got.New)
		var mask uint64
		for i, run := range all {
			if run.First < 0 || run.First+run.Count > ways || mask&run.Mask() != 0 {
				t.Fatalf("%d ways, %v, %d: %v", ways, held, count, got)
			}
			if i < len(held) && run.Count != held[i].Count {
				t.Fatalf("group %d resized: %v", i, got)
			}
			mask |= run.Mask()
		}
		if got.New.Count != count {
			t.Fatalf("new run %v", got.New)
		}
	}
}

// fewestMoves is the fewest groups any layout keeping the groups in their order moves to free
// count contiguous ways, found by trying every such layout (small nodes only).
func fewestMoves(ways int, held []Run, count int) int {
	best := len(held) + 1
	var place func(i, from int, placed []Run)
	place = func(i, from int, placed []Run) {
		if i == len(held) {
			var mask uint64
			for _, r := range placed {
				mask |= r.Mask()
			}
			for first := 0; first+count <= ways; first++ {
				if (Run{first, count}).Mask()&mask == 0 {
					moved := 0
					for k, r := range placed {
						if r != held[k] {
							moved++
						}
					}
					best = min(best, moved)
					return
				}
			}
			return
		}
		for first := from; first+held[i].Count <= ways; first++ {
			place(i+1, first+held[i].Count, append(placed, Run{first, held[i].Count}))
		}
	}
	place(0, 0, nil)
	return best
}

// Compact moves no more groups than the best order-keeping layout, on every layout of a small
// node it can be checked against by trying them all.
func TestCompactMovesNoMoreThanAnyOrderKeepingLayout(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for trial := 0; trial < 3000; trial++ {
		ways := 2 + r.Intn(11)
		var held []Run
		for w := 0; w < ways; {
			n := 1 + r.Intn(3)
			if w+n <= ways && r.Intn(3) > 0 {
				held = append(held, Run{w, n})
			}
			w += n + r.Intn(2)
		}
		used := 0
		for _, h := range held {
			used += h.Count
		}
		if used >= ways {
			continue
		}
		count := 1 + r.Intn(ways-used)
		got, err := Compact(ways, held, count)
		if err != nil {
			t.Fatal(err)
		}
		if want := fewestMoves(ways, held, count); got.Moved != want {
			t.Fatalf("%d ways, %v, %d: %d moved (%v), the best layout moves %d", ways, held, count, got.Moved, got, want)
		}
	}
}
