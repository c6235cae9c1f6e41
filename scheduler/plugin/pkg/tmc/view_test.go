package tmc

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"weak"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

const testPattern = `{"schema": "tmc.pattern/v1", "plan": "plan-1", "machine": 0, "slots": [` +
	`{"workload": "a", "dram_bytes": 4, "slow_bytes": 0, "llc_ways": 1, "count": 2},` +
	`{"workload": "b", "dram_bytes": 4, "slow_bytes": 2, "llc_ways": 1, "count": 1}]}`

// lockedState is a node's state as the locked accounting computes it: the metadata parsed
// afresh, the record read under the lock.
func lockedState(c *Cache, node *v1.Node, pod PlacedKey) NodeState {
	p := parseNode(node)
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stateLocked(c.nodes[node.Name], p, pod, true)
}

// TestTheLockFreeReadAgreesWithTheLockedAccounting: what Filter and Score read without a lock
// (a node's published view, its pool's published sums) is, after every change in any order
// (reservations assumed, forgotten, bound, released; nodes updated, moved between pools,
// deleted and back; the operator's pool sizes), what the accounting under the lock says.
func TestTheLockFreeReadAgreesWithTheLockedAccounting(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	c := NewCache()
	pools := []string{"", "r0", "r1"}
	nodes := map[string]*v1.Node{}
	version := 0
	update := func(name string) {
		version++
		pool := pools[rng.IntN(len(pools))]
		node := tmcNode(name, int64(2+rng.IntN(6)), 64, int64(rng.IntN(2))*20, 8, pool, int64(50+rng.IntN(100)))
		if rng.IntN(3) == 0 {
			node.Annotations[PatternAnnotation] = testPattern
		}
		if rng.IntN(5) == 0 {
			node.Spec.Unschedulable = true
		}
		node.ResourceVersion = fmt.Sprint(version)
		nodes[name] = node
		// As the node handler delivers it (ObserveNode): its pool, then its metadata.
		parsed := parseNode(node)
		c.SetNode(name, parsed.capacity)
		c.Observed(node, parsed)
	}
	var held, bound []types.UID
	key := PlacedKey{Workload: "a", DRAMBytes: 4, LLCWays: 1}
	for step := range 4000 {
		name := fmt.Sprintf("n%d", rng.IntN(10))
		switch op := rng.IntN(10); {
		case op == 0 || nodes[name] == nil:
			update(name)
		case op == 1:
			c.RemoveNode(name)
			c.ForgetNode(name)
			if rng.IntN(2) == 0 {
				// Delivered again as the same object: the index finds a record made anew.
				parsed := parseNode(nodes[name])
				c.SetNode(name, parsed.capacity)
				c.Observed(nodes[name], parsed)
				break
			}
			delete(nodes, name)
		case op == 2:
			c.SetPools(map[string]int64{"r0": int64(rng.IntN(200))})
		case op <= 5:
			capacity, cpus, _ := nodeCapacity(nodes[name])
			workload := []string{"a", "b", ""}[rng.IntN(3)]
			ask := recommendedAsk(1, 4, int64(rng.IntN(3))*2, 1)
			if workload != "" {
				ask.Workload = &workload
			}
			uid := types.UID(fmt.Sprint("p", step))
			if _, err := c.Assume(uid, name, capacity, cpus, ask); err == nil {
				held = append(held, uid)
			}
		case op == 6 && len(held) > 0:
			i := rng.IntN(len(held))
			c.Forget(held[i])
			held = slices.Delete(held, i, i+1)
		case op == 7 && len(held) > 0:
			i := rng.IntN(len(held))
			r, ok := c.Held(held[i])
			if ok {
				p := &Placement{Node: r.Node, Configuration: PlacedConfiguration{
					VCPUs: r.VCPUs, DRAMBytes: r.DRAMBytes, SlowBytes: r.SlowBytes,
				}, SlowFromPool: r.SlowFromPool, LLCMask: FormatMask(r.LLCMask)}
				if r.Workload != "" {
					p.Workload = &r.Workload
				}
				c.Bind(held[i], p)
				bound = append(bound, held[i])
			}
			held = slices.Delete(held, i, i+1)
		case len(bound) > 0:
			i := rng.IntN(len(bound))
			c.Release(bound[i])
			bound = slices.Delete(bound, i, i+1)
		}
		for name, node := range nodes {
			got, want := c.State(node, key, true), lockedState(c, node, key)
			if got.Usage != want.Usage || got.Preference != want.Preference || got.Ready != want.Ready ||
				got.CPUs != want.CPUs || (got.Capacity == nil) != (want.Capacity == nil) {
				t.Fatalf("step %d, node %s: read without the lock %+v, under it %+v", step, name, got, want)
			}
		}
	}
	// Every node the handler delivered is read from its published view, with no read before.
	for name, node := range nodes {
		if c.published(node) == nil {
			t.Fatalf("node %s is read under the lock", name)
		}
	}
}

// TestTheNextPodsFilterSeesEachReservation: kube-scheduler's scheduling cycle is serial and
// runs Filter on parallel goroutines, while binding cycles and informers change the cache at
// the same time. A node that Filter passes after the previous pods' Reserve must take the pod:
// Reserve never finds it full, however the other writers interleave (go test -race checks the
// reads too).
func TestTheNextPodsFilterSeesEachReservation(t *testing.T) {
	e := &Engine{cache: NewCache()}
	var nodes []*v1.Node
	for i := range 20 {
		pool, slow := "", int64(30)
		if i%2 == 1 {
			pool, slow = "rack", 0
		}
		node := tmcNode(fmt.Sprintf("n%d", i), 4, 64, slow, 8, pool, 30)
		node.ResourceVersion = "1"
		e.ObserveNode(node)
		nodes = append(nodes, node)
	}
	ask := recommendedAsk(1, 4, 1, 1)
	binds := make(chan types.UID, 100)
	var writers sync.WaitGroup
	writers.Add(1)
	go func() { // binding cycles: each reservation counted as bound, then the pod deleted
		defer writers.Done()
		for uid := range binds {
			if r, ok := e.cache.Held(uid); ok {
				e.cache.Bind(uid, &Placement{Node: r.Node, Configuration: PlacedConfiguration{
					VCPUs: r.VCPUs, DRAMBytes: r.DRAMBytes, SlowBytes: r.SlowBytes,
				}, SlowFromPool: r.SlowFromPool, LLCMask: FormatMask(r.LLCMask)})
			}
			if uid[len(uid)-1]%3 != 0 {
				e.cache.Release(uid)
			}
		}
	}()
	placed := 0
	for pod := range 400 {
		fits := make([]bool, len(nodes))
		var filter sync.WaitGroup
		for g := range 4 {
			filter.Add(1)
			go func() {
				defer filter.Done()
				for i := g; i < len(nodes); i += 4 {
					fits[i] = e.Fit(nodes[i], ask) == nil
					if fits[i] {
						_ = e.RawScore(nodes[i], ask)
					}
				}
			}()
		}
		filter.Wait()
		i := slices.Index(fits, true)
		if i < 0 {
			continue // full until the binding goroutine releases some
		}
		uid := types.UID(fmt.Sprint("pod-", pod))
		if _, err := e.Reserve(uid, nodes[i], ask); err != nil {
			t.Fatalf("pod %d: Filter passed %s, Reserve refused it: %v", pod, nodes[i].Name, err)
		}
		placed++
		binds <- uid
	}
	close(binds)
	writers.Wait()
	if placed < 100 {
		t.Fatalf("only %d pods placed", placed)
	}
}

// TestAnUpdatedNodesOldObjectIsNotKeptAlive: readers find a node's record by the object they
// hold, so the record keeps the object it last parsed; the node informer's update replaces it
// at once (readers find the update's object at once), and once the index is made anew nothing of
// the cache holds the old object (the node informer's memory is not doubled by updated nodes).
func TestAnUpdatedNodesOldObjectIsNotKeptAlive(t *testing.T) {
	e := &Engine{cache: NewCache()}
	c := e.cache
	old := tmcNode("n1", 8, 64<<30, 0, 12, "", 0)
	old.ResourceVersion = "1"
	e.ObserveNode(old)
	key := PlacedKey{Workload: "a"}
	if s := c.State(old, key, true); s.Capacity == nil || s.Capacity.DRAMBytes != 64<<30 {
		t.Fatalf("the node as first observed: %+v", s)
	}
	gone := weak.Make(old)
	updated := tmcNode("n1", 8, 32<<30, 0, 12, "", 0)
	updated.ResourceVersion = "2"
	e.ObserveNode(updated)
	old = nil
	n := c.nodes["n1"]
	if n.obj != updated || n.view.Load().obj != updated {
		t.Fatalf("the record and its view keep another object than the update's")
	}
	if s := c.State(updated, key, true); s.Capacity == nil || s.Capacity.DRAMBytes != 32<<30 {
		t.Fatalf("the node as updated: %+v", s)
	}
	if c.published(updated) == nil {
		t.Fatal("the updated node is read under the lock before the index is made anew")
	}
	c.mu.Lock()
	c.reindexLocked()
	c.mu.Unlock()
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("the node's object before its update is still reachable from the cache")
	}
	if c.published(updated) == nil {
		t.Fatal("the updated node is read under the lock after the index was made anew")
	}
}

// TestEveryDeliveredNodeIsFoundWithoutTheLock: whatever the node handler delivers (nodes added,
// updated in any order, deleted), the object it delivered is found at once by a reader holding it,
// with no read in between to make the index anew; the records given another object since the
// index's whole map was made stay within their bound.
func TestEveryDeliveredNodeIsFoundWithoutTheLock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	e := &Engine{cache: NewCache()}
	c := e.cache
	nodes := map[string]*v1.Node{}
	for step := range 3000 {
		name := fmt.Sprintf("n%d", rng.IntN(300))
		if nodes[name] != nil && rng.IntN(20) == 0 {
			c.RemoveNode(name)
			c.ForgetNode(name)
			delete(nodes, name)
			continue
		}
		node := tmcNode(name, 8, 64<<30, 0, 12, "", 0)
		node.ResourceVersion = fmt.Sprint(step + 1)
		e.ObserveNode(node)
		nodes[name] = node
		if c.published(node) == nil {
			t.Fatalf("step %d: %s as just delivered is read under the lock", step, name)
		}
		if x := c.index.Load(); len(x.recent) > recentBound(len(c.nodes)) {
			t.Fatalf("step %d: %d records beside the index's whole map, bound %d", step, len(x.recent), recentBound(len(c.nodes)))
		}
	}
	for name, node := range nodes {
		if c.published(node) == nil {
			t.Fatalf("%s is read under the lock", name)
		}
	}
}
