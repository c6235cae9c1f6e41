package tmc

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func fallbackAsk(vcpus, dram int64) *PodAsk {
	return &PodAsk{OptedIn: true, Objective: "cheapest", VCPUs: vcpus, MemoryBytes: dram, DRAMBytes: dram}
}

func recommendedAsk(vcpus, dram, slow int64, ways int) *PodAsk {
	return &PodAsk{OptedIn: true, Objective: "cheapest", VCPUs: vcpus, DRAMBytes: dram, SlowBytes: slow, LLCWays: ways}
}

func TestAssumeChoosesBestFitRunsAndForgets(t *testing.T) {
	c := NewCache()
	node := &NodeCapacity{DRAMBytes: 64, LLCWays: 11}
	a, err := c.Assume("a", "n1", node, 16, recommendedAsk(2, 8, 0, 3))
	if err != nil || a.LLCMask != 0x7 {
		t.Fatalf("first pod: %+v, %v", a, err)
	}
	b, err := c.Assume("b", "n1", node, 16, recommendedAsk(2, 8, 0, 2))
	if err != nil || b.LLCMask != 0x18 {
		t.Fatalf("second pod: %+v, %v", b, err)
	}
	// Release the first: ways 0-2 free again, a 3-way hole before b and a 6-way run after it.
	c.Forget("a")
	d, err := c.Assume("d", "n1", node, 16, recommendedAsk(1, 1, 0, 3))
	if err != nil || d.LLCMask != 0x7 {
		t.Fatalf("best fit takes the 3-way hole, not the long run: %#x, %v", d.LLCMask, err)
	}
	u := c.Usage("n1", node, 16)
	if u.UsedCPUs != 3 || u.UsedDRAMBytes != 9 || u.UsedMask != 0x1f {
		t.Errorf("usage after forget and assume: %+v", u)
	}
	// Assuming again on the same node changes nothing; on another node it moves.
	if again, _ := c.Assume("d", "n1", node, 16, recommendedAsk(1, 1, 0, 3)); again != d {
		t.Errorf("assumed twice: %+v", again)
	}
	if _, err := c.Assume("d", "n2", node, 16, recommendedAsk(1, 1, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if u := c.Usage("n1", node, 16); u.UsedMask != 0x18 || u.UsedCPUs != 2 {
		t.Errorf("n1 after d moved: %+v", u)
	}
	c.Forget("nobody") // idempotent, and for a pod never assumed
	if c.Len() != 2 {
		t.Errorf("%d reservations, want 2", c.Len())
	}
}

func TestAssumeRefusesWhatDoesNotFit(t *testing.T) {
	c := NewCache()
	node := &NodeCapacity{DRAMBytes: 16, SlowBytes: 8, LLCWays: 4}
	if _, err := c.Assume("a", "n", node, 4, recommendedAsk(1, 10, 6, 2)); err != nil {
		t.Fatal(err)
	}
	for name, ask := range map[string]*PodAsk{
		"cpus":       recommendedAsk(4, 1, 0, 1),
		"dram":       recommendedAsk(1, 7, 0, 1),
		"slow":       recommendedAsk(1, 1, 3, 1),
		"contiguous": recommendedAsk(1, 1, 0, 3),
	} {
		if r, err := c.Assume(types.UID(name), "n", node, 4, ask); err == nil {
			t.Errorf("%s: assumed %+v on a node that cannot hold it", name, r)
		}
	}
	if c.Len() != 1 {
		t.Errorf("a refused assume left a reservation: %d", c.Len())
	}
}

func TestFallbackTakesTheLongestFreeRun(t *testing.T) {
	c := NewCache()
	node := &NodeCapacity{DRAMBytes: 64, LLCWays: 8}
	c.Bind("x", &Placement{Node: "n", Configuration: PlacedConfiguration{VCPUs: 1, LLCWays: 1}, LLCMask: "0x4"})
	r, err := c.Assume("f", "n", node, 8, fallbackAsk(1, 4))
	if err != nil || r.LLCMask != 0xf8 {
		t.Fatalf("fallback on ways 0-1 and 3-7 free: %#x, %v; want the 5-way run 0xf8", r.LLCMask, err)
	}
}

func TestSlowMemoryLocalFirstThenRackPool(t *testing.T) {
	c := NewCache()
	a := &NodeCapacity{DRAMBytes: 64, SlowBytes: 10, LLCWays: 8, SlowPool: "rack", SlowPoolBytes: ptr(int64(100))}
	b := &NodeCapacity{DRAMBytes: 64, LLCWays: 8, SlowPool: "rack"}
	c.SetNode("a", a)
	c.SetNode("b", b)
	first, _ := c.Assume("1", "a", a, 8, recommendedAsk(1, 1, 8, 1))
	second, _ := c.Assume("2", "a", a, 8, recommendedAsk(1, 1, 8, 1))
	third, _ := c.Assume("3", "b", b, 8, recommendedAsk(1, 1, 80, 1))
	if first.SlowFromPool || !second.SlowFromPool || !third.SlowFromPool {
		t.Fatalf("local first, then the pool: %v %v %v", first.SlowFromPool, second.SlowFromPool, third.SlowFromPool)
	}
	// The pool is shared: 88 of 100 bytes are held, from two nodes.
	if u := c.Usage("b", b, 8); u.PoolSlowBytes != 100 || u.UsedPoolSlowBytes != 88 {
		t.Errorf("pool usage seen from b: %+v", u)
	}
	if _, err := c.Assume("4", "b", b, 8, recommendedAsk(1, 1, 13, 1)); err == nil {
		t.Error("the pool was overcommitted")
	}
	// The packing score sees a's own slow tier, and b's pool.
	if l := c.Usage("a", a, 8).Load(); l.SlowBytes != 10 || l.UsedSlowBytes != 8 {
		t.Errorf("a's load: %+v", l)
	}
	if l := c.Usage("b", b, 8).Load(); l.SlowBytes != 100 || l.UsedSlowBytes != 88 {
		t.Errorf("b's load: %+v", l)
	}
}

func TestBoundPlacementsSurviveUnreserveAndRebuildTheCache(t *testing.T) {
	node := &NodeCapacity{DRAMBytes: 64, LLCWays: 8}
	before := NewCache()
	var placements []*Placement
	for i, ask := range []*PodAsk{recommendedAsk(1, 4, 0, 2), recommendedAsk(2, 8, 0, 3), fallbackAsk(1, 2)} {
		uid := types.UID(string(rune('a' + i)))
		r, err := before.Assume(uid, "n", node, 8, ask)
		if err != nil {
			t.Fatal(err)
		}
		placements = append(placements, PlacementOf(ask, r))
	}
	// A restarted scheduler reads the bound pods' annotations: the same usage, the same ways.
	after := NewCache()
	for i, p := range placements {
		ann, err := PlacementAnnotations(p)
		if err != nil {
			t.Fatal(err)
		}
		read, err := ParsePlacement(ann)
		if err != nil {
			t.Fatal(err)
		}
		after.Bind(types.UID(string(rune('a'+i))), read)
	}
	if b, a := before.Usage("n", node, 8), after.Usage("n", node, 8); b != a || a.UsedMask != 0xff {
		t.Fatalf("rebuilt %+v, was %+v", a, b)
	}
	// Unreserve never drops a bound pod's reservation; the pod's end does.
	after.Forget("a")
	if _, ok := after.Held("a"); !ok {
		t.Error("Forget dropped a bound pod")
	}
	after.Release("a")
	if u := after.Usage("n", node, 8); u.UsedMask != 0xfc || u.UsedCPUs != 3 {
		t.Errorf("after the pod's end: %+v", u)
	}
	// Bind over an assume of the same pod replaces it rather than counting it twice.
	c := NewCache()
	r, _ := c.Assume("z", "n", node, 8, recommendedAsk(1, 4, 0, 2))
	c.Bind("z", PlacementOf(recommendedAsk(1, 4, 0, 2), r))
	if u := c.Usage("n", node, 8); u.UsedCPUs != 1 || u.UsedDRAMBytes != 4 || c.Len() != 1 {
		t.Errorf("assumed then bound: %+v", u)
	}
}

func TestJudgeSaysNeverOrNotNow(t *testing.T) {
	u := Usage{CPUs: 8, DRAMBytes: 64, LocalSlowBytes: 0, LLCWays: 8, UsedCPUs: 6, UsedMask: 0x0f}
	for name, c := range map[string]struct {
		ask   Ask
		never bool
	}{
		"too few CPUs in all":  {Ask{VCPUs: 9, LLCWays: 1}, true},
		"too little DRAM":      {Ask{VCPUs: 1, DRAMBytes: 65, LLCWays: 1}, true},
		"too few ways":         {Ask{VCPUs: 1, LLCWays: 9}, true},
		"no slow tier":         {Ask{VCPUs: 1, SlowBytes: 1, LLCWays: 1}, true},
		"CPUs taken":           {Ask{VCPUs: 3, LLCWays: 1}, false},
		"no 5-way run free":    {Ask{VCPUs: 1, LLCWays: 5}, false},
		"fits on the 4 ways":   {Ask{VCPUs: 2, DRAMBytes: 64, LLCWays: 4}, false},
		"fits, nothing to say": {Ask{VCPUs: 1, LLCWays: 1}, false},
	} {
		v := Judge(u, c.ask)
		fits := name == "fits on the 4 ways" || name == "fits, nothing to say"
		if fits != (v == nil) || v != nil && v.Unresolvable != c.never {
			t.Errorf("%s: %+v", name, v)
		}
	}
}

// A bound pod's reservation is never moved by an attempt to place it on another node.
func TestAssumeNeverMovesABoundPod(t *testing.T) {
	node := &NodeCapacity{DRAMBytes: 64, LLCWays: 8}
	c := NewCache()
	ask := &PodAsk{OptedIn: true, VCPUs: 1, DRAMBytes: 8, LLCWays: 2}
	held, err := c.Assume("p", "a", node, 4, ask)
	if err != nil {
		t.Fatal(err)
	}
	c.Bind("p", &Placement{Schema: PlacementSchema, Node: "a", Objective: "cheapest", LLCMask: FormatMask(held.LLCMask),
		Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 8, LLCWays: 2}})
	if _, err := c.Assume("p", "b", node, 4, ask); err == nil {
		t.Fatal("a bound pod was assumed on another node")
	}
	if got, ok := c.Held("p"); !ok || got.Node != "a" || !got.Bound || c.Len() != 1 {
		t.Fatalf("the bound pod's reservation became %+v", got)
	}
}

func TestARackPoolsSizeIsTheOperatorsNotTheLastNodes(t *testing.T) {
	// The honest member publishes 256; another node claims 4 PiB for the same pool.
	honest := &NodeCapacity{DRAMBytes: 64, LLCWays: 8, SlowPool: "rack", SlowPoolBytes: ptr(int64(256))}
	greedy := &NodeCapacity{DRAMBytes: 64, LLCWays: 8, SlowPool: "rack", SlowPoolBytes: ptr(int64(4 << 50))}
	c := NewCache()
	c.SetNode("honest", honest)
	c.SetNode("greedy", greedy)
	if u := c.Usage("greedy", greedy, 8); u.PoolSlowBytes != 256 {
		t.Fatalf("unconfigured: the smallest member's claim, got %d", u.PoolSlowBytes)
	}
	if _, err := c.Assume("1", "greedy", greedy, 8, recommendedAsk(1, 1, 400, 1)); err == nil {
		t.Fatal("400 bytes placed from a 256-byte pool")
	}
	// The honest node leaves: the claim left is not a size the operator set.
	c.RemoveNode("honest")
	c.SetPools(map[string]int64{"rack": 256})
	if u := c.Usage("greedy", greedy, 8); u.PoolSlowBytes != 256 {
		t.Fatalf("configured: the operator's size, got %d", u.PoolSlowBytes)
	}
	if _, err := c.Assume("2", "greedy", greedy, 8, recommendedAsk(1, 1, 200, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Assume("3", "greedy", greedy, 8, recommendedAsk(1, 1, 200, 1)); err == nil {
		t.Fatal("400 bytes placed from a pool the operator sized at 256")
	}
	// A pool the operator sized at 0 gives nothing, whatever its nodes say.
	c.SetPools(map[string]int64{"rack": 0})
	if u := c.Usage("greedy", greedy, 8); u.PoolSlowBytes != 0 {
		t.Fatalf("configured 0: got %d", u.PoolSlowBytes)
	}
}

// A pod released for good is not counted again by a late event of it.
func TestAReleasedPodIsNotCountedAgainByALateEvent(t *testing.T) {
	c := NewCache()
	ways := "0x3"
	p := &Placement{Node: "a", Configuration: PlacedConfiguration{VCPUs: 1, DRAMBytes: 1 << 30, LLCWays: 2}, LLCMask: ways}
	c.Bind("u", p)
	c.Release("u")
	c.Bind("u", p)
	if _, ok := c.Held("u"); ok || c.Len() != 0 {
		t.Fatalf("a late event counted a released pod again")
	}
}

// TestPoolUsageIsTheSumOverItsMembers: the running sums a node's usage reads agree, after
// reservations, releases and nodes joining, leaving and changing pools in any order, with a
// walk over the pools' members.
func TestPoolUsageIsTheSumOverItsMembers(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	c := NewCache()
	pools := []string{"", "r0", "r1", "r2"}
	capacityOf := map[string]*NodeCapacity{}
	setNode := func(name string) {
		pool := pools[rng.IntN(len(pools))]
		capacity := &NodeCapacity{DRAMBytes: 1 << 40, SlowBytes: int64(rng.IntN(2)) * 50, LLCWays: 48, SlowPool: pool}
		if pool != "" && rng.IntN(3) > 0 {
			capacity.SlowPoolBytes = ptr(int64(500 + rng.IntN(500)))
		}
		capacityOf[name] = capacity
		switch rng.IntN(6) {
		case 0:
			c.RemoveNode(name)
			return
		case 1:
			c.ForgetNode(name) // what was parsed of it: the usage stays
		}
		c.SetNode(name, capacity)
	}
	var held []types.UID
	for step := range 3000 {
		name := fmt.Sprintf("n%d", rng.IntN(12))
		switch rng.IntN(4) {
		case 0:
			setNode(name)
		case 1, 2:
			capacity := capacityOf[name]
			if capacity == nil {
				setNode(name)
				capacity = capacityOf[name]
			}
			uid := types.UID(fmt.Sprint("p", step))
			if _, err := c.Assume(uid, name, capacity, 1000, recommendedAsk(1, 1, int64(1+rng.IntN(40)), 1)); err == nil {
				held = append(held, uid)
			}
		default:
			if len(held) > 0 {
				i := rng.IntN(len(held))
				c.Release(held[i])
				held = slices.Delete(held, i, i+1)
			}
		}
		for node, capacity := range capacityOf {
			got := c.Usage(node, capacity, 1000)
			want := walkedPoolUsage(c, node, capacity)
			if got.PoolSlowBytes != want.PoolSlowBytes || got.UsedPoolSlowBytes != want.UsedPoolSlowBytes {
				t.Fatalf("step %d, node %s: pool %d used %d, a walk over the members says %d used %d",
					step, node, got.PoolSlowBytes, got.UsedPoolSlowBytes, want.PoolSlowBytes, want.UsedPoolSlowBytes)
			}
		}
	}
}

// TestANodesRecordGoesWithItsLastUse: a node's record (what it holds, its pool, its parsed
// metadata) is dropped once none of them is left, so deleted nodes do not pile up.
func TestANodesRecordGoesWithItsLastUse(t *testing.T) {
	c := NewCache()
	node := tmcNode("a", 8, 32<<30, 0, 8, "rack", 100<<30)
	node.ResourceVersion = "1"
	state := c.State(node, PlacedKey{}, false)
	if state.Capacity == nil || state.CPUs != 8 {
		t.Fatalf("state: %+v", state)
	}
	c.SetNode("a", state.Capacity)
	if _, err := c.Assume("p", "a", state.Capacity, state.CPUs, recommendedAsk(1, 1<<30, 1<<30, 1)); err != nil {
		t.Fatal(err)
	}
	c.RemoveNode("a")
	c.ForgetNode("a")
	if len(c.nodes) != 1 {
		t.Fatalf("a node still holding a pod lost its record: %d records", len(c.nodes))
	}
	c.Release("p")
	if len(c.nodes) != 0 || len(c.racks) != 0 || len(c.pools) != 0 {
		t.Fatalf("records left: %d nodes, %d racks, %d pool sums", len(c.nodes), len(c.racks), len(c.pools))
	}
}

// walkedPoolUsage is a node's pool size and usage by a walk over the pool's members.
func walkedPoolUsage(c *Cache, name string, capacity *NodeCapacity) Usage {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var u Usage
	pool := capacity.SlowPool
	if pool == "" {
		return u
	}
	size, claimed := int64(0), false
	for member := range c.racks[pool] {
		if v, ok := c.claims[member]; ok && (!claimed || v < size) {
			size, claimed = v, true
		}
		u.UsedPoolSlowBytes += c.takenFromPool(member)
	}
	if configured, ok := c.configured[pool]; ok {
		size = configured
	}
	u.PoolSlowBytes = size
	if _, listed := c.racks[pool][name]; !listed {
		u.UsedPoolSlowBytes += c.takenFromPool(name)
	}
	return u
}
