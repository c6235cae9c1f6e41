package tmc

// The reservations: what each pod holds on its node, assumed by Reserve or read from a bound pod's
// placement, and the node's running sums they add to and take from.

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
)

// Cache holds every reservation the scheduler knows of: those it assumed (Reserve) and those of
// bound pods (their placement annotations, from the pod informer). It is the plugin's only
// accounting: the API server is the source of truth and the cache is rebuilt from it on restart.
type Cache struct {
	// mu is the writers' lock (and the readers' on the rare paths): every writer releases it
	// with unlock, which publishes what it changed.
	mu    sync.RWMutex
	pods  map[types.UID]Reservation
	nodes map[string]*nodeUse
	// A rack pool's size is the operator's (configured, from the chart's rackPools) when it is
	// named there; else the smallest any current member node claims (claims): a node can shrink
	// a pool it shares, never grow it, and a pool outlives no member's claim.
	configured map[string]int64
	claims     map[string]int64               // node -> the pool size it publishes
	racks      map[string]map[string]struct{} // rack pool -> its nodes (each node's record says its own)
	// Kept up to date as reservations and memberships change, so that a node's usage costs a
	// few loads instead of a walk over its pool's members (Filter and Score ask for every
	// node for every pod: the walk was a fifth of tmc-scheduler's CPU at 5,000 nodes).
	pools map[string]*rackPool
	// Pods released for good (deleted or finished), newest last: a late observation of such a
	// pod (a Bind that returns after the pod went, an update delivered after its deletion) must not
	// count it again. UIDs never come back; the most recent releasedKept are remembered.
	released      map[types.UID]struct{}
	releasedOrder []types.UID
	// index is the records by node object as readers find them without the lock (nodeIndex):
	// published by the writers that give records another object (the node handler), never by a
	// reader. drift counts the keys of its all made stale since all was made; moved are the
	// records given another object under the lock, indexed by unlock.
	index atomic.Pointer[nodeIndex]
	drift int
	moved []*nodeUse
	// touched are the records and pools changed under the lock, published by unlock.
	touched      []*nodeUse
	touchedPools []*rackPool
}

// releasedKept bounds the released pods remembered: far more than can be in flight between
// two listeners of one event.
const releasedKept = 65536

// NewCache is an empty cache.
func NewCache() *Cache {
	c := &Cache{
		pods:       map[types.UID]Reservation{},
		nodes:      map[string]*nodeUse{},
		configured: map[string]int64{},
		claims:     map[string]int64{},
		racks:      map[string]map[string]struct{}{},
		pools:      map[string]*rackPool{},
		released:   map[types.UID]struct{}{},
	}
	c.index.Store(&nodeIndex{})
	return c
}

// Reservation is what one pod holds on a node: the engine's unit of accounting, the same as a
// row of the ledger's mirror.
type Reservation struct {
	PodUID       types.UID
	Node         string
	VCPUs        int64
	DRAMBytes    int64
	SlowBytes    int64
	SlowFromPool bool
	LLCMask      uint64
	// Workload is the placement's workload ("" for none): what a node's pattern counts.
	Workload string
	// Bound: read from a bound pod's placement annotation, not only assumed by Reserve. Unreserve
	// never forgets a bound pod's reservation; only the pod's deletion or end does.
	Bound bool
}

// key is what the reservation counts as against a node's pattern; ok false without a workload.
func (r Reservation) key() (PlacedKey, bool) {
	return PlacedKey{Workload: r.Workload, DRAMBytes: r.DRAMBytes, SlowBytes: r.SlowBytes, LLCWays: UsedWays(r.LLCMask)}, r.Workload != ""
}

// countedAs is what the pod counts as against a node's pattern; false without a workload. A
// fallback's ways are not chosen yet (0), so it matches no slot exactly.
func countedAs(ask *PodAsk) (PlacedKey, bool) {
	if ask.Workload == nil || *ask.Workload == "" {
		return PlacedKey{}, false
	}
	return PlacedKey{Workload: *ask.Workload, DRAMBytes: ask.DRAMBytes, SlowBytes: ask.SlowBytes, LLCWays: ask.LLCWays}, true
}

// Preference is the node's preference (Preference) for a pod counted as pod, against the pods
// the cache holds on it.
func (c *Cache) Preference(name string, pattern *NodePattern, pod *PlacedKey) int {
	if pattern == nil || pod == nil {
		return PreferNone
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var placed map[PlacedKey]int
	if n := c.nodes[name]; n != nil {
		placed = n.placed
	}
	return Preference(pattern, placed, pod)
}

// Assume reserves ask for a pod on a node: the checks again under the lock, slow memory from the node first and else from its rack pool, and a CAT
// run chosen from the bits actually held (best fit; the fallback takes every way of the longest
// free run). Assuming a pod it already holds on the same node changes nothing.
func (c *Cache) Assume(uid types.UID, name string, capacity *NodeCapacity, cpus int64, ask *PodAsk) (Reservation, error) {
	return c.AssumeWithout(uid, name, capacity, cpus, ask, nil)
}

// AssumeWithout is Assume judging the node as Filter did: without the bound pods that gone
// reports gone (nil: none), whose reservations the informer's handler has not released yet.
// They stay counted until it does (never less than the API server's pods), so the node's
// sums may briefly hold both.
func (c *Cache) AssumeWithout(uid types.UID, name string, capacity *NodeCapacity, cpus int64, ask *PodAsk, gone func(types.UID) bool) (Reservation, error) {
	c.mu.Lock()
	defer c.unlock()
	if held, ok := c.pods[uid]; ok {
		if held.Node == name {
			return held, nil
		}
		if held.Bound {
			// A bound pod keeps its room until it goes: an attempt to place it elsewhere (a
			// retried bind that read the pod before it was bound) changes nothing.
			return Reservation{}, fmt.Errorf("tmc: the pod is bound to %s already", held.Node)
		}
		c.removeLocked(held)
	}
	u := c.usageLocked(name, capacity, cpus)
	if gone != nil && Judge(u, ask.Ask()) != nil {
		if without, ok := c.usageWithoutLocked(c.nodes[name], capacity, cpus, gone); ok {
			u = without
		}
	}
	if v := Judge(u, ask.Ask()); v != nil {
		return Reservation{}, fmt.Errorf("node %s: %s", name, v.Reason)
	}
	r := Reservation{PodUID: uid, Node: name, VCPUs: ask.VCPUs, DRAMBytes: ask.DRAMBytes, SlowBytes: ask.SlowBytes}
	if ask.Workload != nil {
		r.Workload = *ask.Workload
	}
	if ask.SlowBytes > 0 && u.LocalSlowBytes-u.UsedLocalSlowBytes < ask.SlowBytes {
		r.SlowFromPool = true // Judge saw room in one of the two
	}
	var ok bool
	if ask.LLCWays < 1 {
		r.LLCMask, ok = LongestFreeRun(u.UsedMask, u.LLCWays)
	} else {
		r.LLCMask, ok = BestFitRun(u.UsedMask, u.LLCWays, ask.LLCWays)
	}
	if !ok {
		return Reservation{}, fmt.Errorf("node %s: no free run of %d contiguous LLC ways", name, ask.NeedWays())
	}
	c.addLocked(r)
	return r, nil
}

// Forget drops an assumed reservation (Unreserve). A bound pod's stays: it is released when the
// pod goes.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.unlock()
	if held, ok := c.pods[uid]; ok && !held.Bound {
		c.removeLocked(held)
	}
}

// Disown drops what a pod holds, bound or not, without taking the pod for gone: a later Bind of
// it counts again (a pod whose namespace left tmc's tenant namespaces, or that lost the tiered
// pod label, and may come back).
func (c *Cache) Disown(uid types.UID) {
	c.mu.Lock()
	defer c.unlock()
	if held, ok := c.pods[uid]; ok {
		c.removeLocked(held)
	}
}

// Release drops a pod's reservation whatever its state: the pod was deleted or finished.
func (c *Cache) Release(uid types.UID) {
	c.mu.Lock()
	defer c.unlock()
	if held, ok := c.pods[uid]; ok {
		c.removeLocked(held)
	}
	if _, seen := c.released[uid]; !seen {
		c.released[uid] = struct{}{}
		c.releasedOrder = append(c.releasedOrder, uid)
		if len(c.releasedOrder) > releasedKept {
			delete(c.released, c.releasedOrder[0])
			c.releasedOrder = c.releasedOrder[1:]
		}
	}
}

// Bind records what a bound pod's placement annotation says it holds, replacing what Reserve
// assumed for it: how a restarted scheduler recovers, and how a pod bound by another replica
// (or through the other front door) is counted.
func (c *Cache) Bind(uid types.UID, p *Placement) {
	r := Reservation{
		PodUID: uid, Node: p.Node, VCPUs: p.Configuration.VCPUs, DRAMBytes: p.Configuration.DRAMBytes,
		SlowBytes: p.Configuration.SlowBytes, SlowFromPool: p.SlowFromPool, LLCMask: p.LLCMaskBits(), Bound: true,
	}
	if p.Workload != nil {
		r.Workload = *p.Workload
	}
	c.mu.Lock()
	defer c.unlock()
	if _, gone := c.released[uid]; gone {
		return // deleted or finished: a late event of it counts nothing
	}
	if held, ok := c.pods[uid]; ok {
		if held == r {
			return
		}
		if assumed := held; !assumed.Bound {
			assumed.Bound = true
			if assumed == r {
				// What Reserve assumed, now bound: the same room, only marked bound (no change
				// to the node's usage, nothing to publish).
				c.pods[uid] = r
				return
			}
		}
		c.removeLocked(held)
	}
	c.addLocked(r)
}

// BoundOn lists the pods counted as bound on a node.
func (c *Cache) BoundOn(node string) []types.UID {
	c.mu.RLock()
	defer c.mu.RUnlock()
	use := c.nodes[node]
	if use == nil {
		return nil
	}
	out := make([]types.UID, 0, len(use.masks))
	for uid := range use.masks {
		if r, ok := c.pods[uid]; ok && r.Bound {
			out = append(out, uid)
		}
	}
	return out
}

// Held is a pod's reservation, if the cache has one.
func (c *Cache) Held(uid types.UID) (Reservation, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r, ok := c.pods[uid]
	return r, ok
}

// Len is the number of reservations held.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.pods)
}

func (c *Cache) addLocked(r Reservation) {
	n := c.recordLocked(r.Node)
	c.touchLocked(n)
	if n.masks == nil {
		n.masks = map[types.UID]uint64{}
	}
	if key, ok := r.key(); ok {
		placed := maps.Clone(n.placed)
		if placed == nil {
			placed = map[PlacedKey]int{}
		}
		placed[key]++
		n.placed = placed
	}
	n.cpus += r.VCPUs
	n.dram += r.DRAMBytes
	if r.SlowFromPool {
		n.slowFromPool += r.SlowBytes
		if n.pool != nil {
			n.pool.usedLocked += r.SlowBytes
		}
	} else {
		n.slowLocal += r.SlowBytes
	}
	// Two reservations never share a way on a node the cache placed alone; a mask that overlaps
	// one already held (placements written by two schedulers at once) still counts as used.
	n.mask |= r.LLCMask
	n.masks[r.PodUID] = r.LLCMask
	c.pods[r.PodUID] = r
}

func (c *Cache) removeLocked(r Reservation) {
	delete(c.pods, r.PodUID)
	n := c.nodes[r.Node]
	if n == nil {
		return
	}
	c.touchLocked(n)
	n.cpus -= r.VCPUs
	n.dram -= r.DRAMBytes
	if r.SlowFromPool {
		n.slowFromPool -= r.SlowBytes
		if n.pool != nil {
			n.pool.usedLocked -= r.SlowBytes
		}
	} else {
		n.slowLocal -= r.SlowBytes
	}
	if key, ok := r.key(); ok {
		placed := maps.Clone(n.placed)
		if placed[key]--; placed[key] <= 0 {
			delete(placed, key)
		}
		n.placed = placed
	}
	// The mask is rebuilt from the node's other reservations: an overlapping one keeps its ways.
	delete(n.masks, r.PodUID)
	n.mask = 0
	for _, mask := range n.masks {
		n.mask |= mask
	}
	if n.idle() {
		c.dropLocked(r.Node, n)
	}
}
