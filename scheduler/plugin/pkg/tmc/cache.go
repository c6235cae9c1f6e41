package tmc

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

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

// nodeUse is everything the cache knows of one node, in one record so that judging a node for
// a pod costs one lookup by name (at 20,000 nodes each lookup in a map that size is a cache
// miss, and Filter and Score ask for every node for every pod): what its reservations hold,
// the rack pool the node informer says it belongs to, and its metadata as last parsed. Its
// fields are the writers' (under the cache's lock); view is what readers see of them.
type nodeUse struct {
	// view is the record as Filter and Score read it without a lock: made anew by every change
	// and stored whole (nil until the node's metadata is parsed). First: the one field readers
	// load.
	view atomic.Pointer[nodeView]
	// dirty: touched under the lock, its view not made anew yet.
	dirty bool
	// obj is the node object last parsed: the index's key. kube-scheduler's NodeInfo and the
	// informer hand out the same object for a node's version, so a reader finds the record by
	// the pointer it holds, without hashing or comparing the name's bytes (cache misses at
	// 5,000 nodes).
	obj *v1.Node

	cpus, dram, slowLocal, slowFromPool int64
	mask                                uint64
	masks                               map[types.UID]uint64 // per pod, to rebuild mask on release
	// placed counts pods by workload and configuration. A published view shares the map, so
	// it is never changed in place: each change makes a new one.
	placed map[PlacedKey]int
	// member is the node's rack pool as the node informer last said ("" for none), and pool
	// its running sums (nil for none): judging a pooled node reads them through this pointer,
	// not by the pool's name in a map.
	member string
	pool   *rackPool
	// parsed is the node's metadata at one object version (nil: not parsed yet).
	parsed *parsedNode
}

// nodeView is a node's record as one change left it, never changed once stored: the node's
// metadata at one object version with what is held on it, in one block of memory, so that
// judging the node reads this and its pool's two sums, and takes no lock.
type nodeView struct {
	// parsed is a copy, not a pointer: one block of memory to read.
	parsed parsedNode
	// obj is the node object parsed: a reader holding another object (an older or newer
	// version) takes the locked path.
	obj *v1.Node
	// usage is the node's capacity and what its reservations hold; for a pooled node, the
	// pool's size and usage are read from pool when the node is judged.
	usage Usage
	pool  *rackPool
	// locked: the node's metadata names a rack pool that its informer membership does not
	// (one of the two is not delivered yet): read it under the lock, as the rare case it is.
	locked bool
	placed map[PlacedKey]int
}

// idle: nothing held, no pool membership, nothing parsed: the record can go.
func (n *nodeUse) idle() bool { return len(n.masks) == 0 && n.member == "" && n.parsed == nil }

// key is what the reservation counts as against a node's pattern; ok false without a workload.
func (r Reservation) key() (PlacedKey, bool) {
	return PlacedKey{Workload: r.Workload, DRAMBytes: r.DRAMBytes, SlowBytes: r.SlowBytes, LLCWays: UsedWays(r.LLCMask)}, r.Workload != ""
}

// NodeState is what Filter and Score read of a node for a pod: its tiered capacity and CPUs (as
// nodeCapacity parses them), whether it is ready, what is held on it, and its pattern's
// preference for the pod.
type NodeState struct {
	Capacity   *NodeCapacity
	CPUs       int64
	Err        error
	Ready      bool
	Usage      Usage
	Preference int
}

// State is a node's NodeState for a pod counted as pod (counted false: no preference asked), its
// metadata parsed once per object version and kept in the node's record. Filter and Score call
// it for every node, from kube-scheduler's 16 goroutines: it reads the node's published view
// without a lock. What a writer changed is published before the writer returns, so the next
// pod's Filter sees the reservation Reserve made for the one before.
func (c *Cache) State(node *v1.Node, pod PlacedKey, counted bool) NodeState {
	if node.ResourceVersion == "" {
		// Not from an informer (tests): parsed each time, nothing kept.
		p := parseNode(node)
		c.mu.RLock()
		defer c.mu.RUnlock()
		return c.stateLocked(c.nodes[node.Name], p, pod, counted)
	}
	idx := c.index.Load()
	if n := (*idx)[node]; n != nil {
		if v := n.view.Load(); v != nil && v.obj == node && !v.locked {
			return v.state(pod, counted)
		}
	}
	return c.stateSlow(node, pod, counted, len(*idx))
}

// state is the view's NodeState, with its pool's sums as they are now.
func (v *nodeView) state(pod PlacedKey, counted bool) NodeState {
	p := &v.parsed
	s := NodeState{Capacity: p.capacity, CPUs: p.cpus, Err: p.err, Ready: p.ready}
	if p.capacity == nil {
		return s
	}
	s.Usage = v.usage
	if v.pool != nil {
		s.Usage.PoolSlowBytes, s.Usage.UsedPoolSlowBytes = v.pool.size.Load(), v.pool.used.Load()
	}
	if counted && p.pattern != nil {
		s.Preference = Preference(p.pattern, v.placed, &pod)
	}
	return s
}

// stateSlow is State for a node whose view is not in the index (new since the index was made),
// not parsed at this version, or pooled in a way only the locked accounting answers.
func (c *Cache) stateSlow(node *v1.Node, pod PlacedKey, counted bool, indexed int) NodeState {
	if c.misses.Add(1) > int64(indexed/8) {
		c.mu.Lock()
		if c.drift > 0 {
			c.reindexLocked()
		} else {
			c.misses.Store(0) // misses of another kind (new versions): a new index finds no more
		}
		c.mu.Unlock()
	}
	c.mu.RLock()
	n := c.nodes[node.Name]
	var p *parsedNode
	if n != nil && n.parsed != nil && n.parsed.version == node.ResourceVersion {
		if n.obj == node {
			defer c.mu.RUnlock()
			return c.stateLocked(n, n.parsed, pod, counted)
		}
		p = n.parsed // the same version in another object (a relist): nothing to parse again
	}
	c.mu.RUnlock()
	if p == nil {
		p = parseNode(node)
	}
	c.mu.Lock()
	defer c.unlock()
	n = c.recordLocked(node.Name)
	n.parsed = p
	n.obj = node
	c.drift++ // the index's key for it is an older object
	c.touchLocked(n)
	return c.stateLocked(n, p, pod, counted)
}

func (c *Cache) stateLocked(n *nodeUse, p *parsedNode, pod PlacedKey, counted bool) NodeState {
	s := NodeState{Capacity: p.capacity, CPUs: p.cpus, Err: p.err, Ready: p.ready}
	if p.capacity == nil {
		return s
	}
	s.Usage = c.usageOfLocked(n, p.capacity, p.cpus)
	if counted && p.pattern != nil {
		var placed map[PlacedKey]int
		if n != nil {
			placed = n.placed
		}
		s.Preference = Preference(p.pattern, placed, &pod)
	}
	return s
}

// touchLocked marks a node's record changed: its view is made anew when the lock is released.
func (c *Cache) touchLocked(n *nodeUse) {
	if !n.dirty {
		n.dirty = true
		c.touched = append(c.touched, n)
	}
	if n.pool != nil {
		c.touchPoolLocked(n.pool)
	}
}

func (c *Cache) touchPoolLocked(rp *rackPool) {
	if !rp.dirty {
		rp.dirty = true
		c.touchedPools = append(c.touchedPools, rp)
	}
}

// unlock publishes what the writer changed (the views of the nodes it touched, the sums of
// their pools) and releases the lock: readers never see a change half made.
func (c *Cache) unlock() {
	for _, rp := range c.touchedPools {
		rp.used.Store(rp.usedLocked)
		rp.size.Store(c.poolSizeLocked(rp.name, rp))
		rp.dirty = false
	}
	for _, n := range c.touched {
		n.view.Store(c.viewLocked(n))
		n.dirty = false
	}
	clear(c.touched)
	clear(c.touchedPools)
	c.touched, c.touchedPools = c.touched[:0], c.touchedPools[:0]
	if c.drift > 0 && c.drift > len(c.nodes)/8 {
		c.reindexLocked()
	}
	c.mu.Unlock()
}

// viewLocked is the node's record as readers are to see it now (nil: not parsed).
func (c *Cache) viewLocked(n *nodeUse) *nodeView {
	p := n.parsed
	if p == nil {
		return nil
	}
	v := &nodeView{parsed: *p, obj: n.obj, placed: n.placed}
	if p.capacity == nil {
		return v
	}
	capacity := p.capacity
	v.usage = Usage{
		CPUs: p.cpus, DRAMBytes: capacity.DRAMBytes, LocalSlowBytes: capacity.SlowBytes, LLCWays: capacity.LLCWays,
		UsedCPUs: n.cpus, UsedDRAMBytes: n.dram, UsedLocalSlowBytes: n.slowLocal, UsedMask: n.mask,
	}
	if pool := capacity.SlowPool; pool != "" {
		if n.member == pool {
			v.pool = n.pool
		} else {
			v.locked = true
		}
	}
	return v
}

// reindexLocked makes the index readers find records in: the records as they are, by the node
// object last parsed. Made anew when records came or went or were parsed from a new object
// (amortised: after an eighth of the records, or as many reads that missed it), not on every
// change: the views it points to carry the changes.
func (c *Cache) reindexLocked() {
	index := make(map[*v1.Node]*nodeUse, len(c.nodes))
	for _, n := range c.nodes {
		if n.obj != nil {
			index[n.obj] = n
		}
	}
	c.index.Store(&index)
	c.drift = 0
	c.misses.Store(0)
}

// recordLocked is the node's record, made when there is none. The index may still hold a
// record dropped for the name, under its last object: its view is gone (nil), so a reader that
// finds it takes the locked path, which reads this one.
func (c *Cache) recordLocked(name string) *nodeUse {
	n := c.nodes[name]
	if n == nil {
		n = &nodeUse{}
		c.nodes[name] = n
		c.drift++
	}
	return n
}

// dropLocked forgets an idle record.
func (c *Cache) dropLocked(name string, n *nodeUse) {
	delete(c.nodes, name)
	c.touchLocked(n) // its view goes
	c.drift++
}

// ForgetNode drops what was parsed of a deleted node (its reservations go with its pods).
func (c *Cache) ForgetNode(name string) {
	c.mu.Lock()
	defer c.unlock()
	if n := c.nodes[name]; n != nil {
		n.parsed, n.obj = nil, nil
		c.touchLocked(n)
		if n.idle() {
			c.dropLocked(name, n)
		}
	}
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
	// pod (an informer's event delivered after the queueing hint released it) must not count it
	// again. UIDs never come back; the most recent releasedKept are remembered.
	released      map[types.UID]struct{}
	releasedOrder []types.UID
	// index is the records by node object as readers find them without the lock: a map never
	// changed once stored, made anew (reindexLocked) when drift (records made, dropped or parsed
	// from a new object since) or misses (reads that did not find a node in it) reach an eighth
	// of the records.
	index  atomic.Pointer[map[*v1.Node]*nodeUse]
	drift  int
	misses atomic.Int64
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
	c.index.Store(&map[*v1.Node]*nodeUse{})
	return c
}

// poolClaim is the smallest pool size a rack pool's members publish; claimed false when none
// publishes one.
type poolClaim struct {
	size    int64
	claimed bool
}

// rackPool is a rack pool's running sums: the slow bytes its member nodes take from it, and the
// smallest size its members claim.
type rackPool struct {
	name       string
	usedLocked int64
	claim      poolClaim
	dirty      bool // touched under the lock, used and size not stored yet
	// used and size are what readers see (size: the operator's or the smallest claim), stored
	// when a writer that changed them releases the lock.
	used, size atomic.Int64
}

// SetPools gives the rack pools' sizes the operator set: authoritative over what nodes publish.
func (c *Cache) SetPools(pools map[string]int64) {
	c.mu.Lock()
	defer c.unlock()
	c.configured = map[string]int64{}
	for name, size := range pools {
		c.configured[name] = size
	}
	for _, rp := range c.pools {
		c.touchPoolLocked(rp)
	}
}

// poolSizeLocked is a rack pool's capacity: the operator's, else the smallest member's claim
// (rp is the pool's sums, nil when it has no member).
func (c *Cache) poolSizeLocked(pool string, rp *rackPool) int64 {
	if len(c.configured) > 0 {
		if size, ok := c.configured[pool]; ok {
			return size
		}
	}
	if rp == nil {
		return 0
	}
	return rp.claim.size // 0 when no member claims a size
}

// claimLocked recomputes a rack pool's smallest claim after its membership or a claim changed,
// and forgets a pool with no member left.
func (c *Cache) claimLocked(pool string) {
	members := c.racks[pool]
	if len(members) == 0 {
		delete(c.racks, pool)
		delete(c.pools, pool)
		return
	}
	claim := poolClaim{}
	for member := range members {
		if v, ok := c.claims[member]; ok && (!claim.claimed || v < claim.size) {
			claim = poolClaim{v, true}
		}
	}
	rp := c.poolLocked(pool)
	rp.claim = claim
	c.touchPoolLocked(rp)
}

// poolLocked is a rack pool's sums, made when there are none.
func (c *Cache) poolLocked(pool string) *rackPool {
	rp := c.pools[pool]
	if rp == nil {
		rp = &rackPool{name: pool}
		c.pools[pool] = rp
	}
	return rp
}

// takenFromPool is what a node's reservations take from its rack pool.
func (c *Cache) takenFromPool(name string) int64 {
	if n := c.nodes[name]; n != nil {
		return n.slowFromPool
	}
	return 0
}

// SetNode records a node's rack pool (and the pool size it claims, when it publishes one). A
// pool's usage is a running sum over its member nodes that a node carries in and out with its
// membership, so reservations seen before their node's pool is known still count once it is.
func (c *Cache) SetNode(name string, capacity *NodeCapacity) {
	c.mu.Lock()
	defer c.unlock()
	if n := c.nodes[name]; n != nil && n.member != "" {
		old := n.member
		delete(c.racks[old], name)
		n.pool.usedLocked -= n.slowFromPool
		c.touchLocked(n) // the pool it leaves, and its view
		n.member, n.pool = "", nil
		c.claimLocked(old)
		if n.idle() {
			c.dropLocked(name, n)
		}
	}
	delete(c.claims, name)
	if capacity == nil || capacity.SlowPool == "" {
		return
	}
	pool := capacity.SlowPool
	n := c.recordLocked(name)
	n.member, n.pool = pool, c.poolLocked(pool)
	if c.racks[pool] == nil {
		c.racks[pool] = map[string]struct{}{}
	}
	c.racks[pool][name] = struct{}{}
	if capacity.SlowPoolBytes != nil {
		c.claims[name] = *capacity.SlowPoolBytes
	}
	n.pool.usedLocked += n.slowFromPool
	c.touchLocked(n)
	c.claimLocked(pool)
}

// Observed records a node's object as its informer delivers it, with its metadata parsed: the
// node's view follows the object at once, and the record does not keep the object it replaces
// alive (only the index does, until it is made anew: at most an eighth of the nodes).
func (c *Cache) Observed(node *v1.Node, parsed *parsedNode) {
	c.mu.Lock()
	defer c.unlock()
	n := c.recordLocked(node.Name)
	if n.obj == node {
		return
	}
	n.parsed, n.obj = parsed, node
	c.drift++ // the index's key for it is an older object
	c.touchLocked(n)
}

// RemoveNode forgets a node's pool membership (its pods' reservations go with the pods).
func (c *Cache) RemoveNode(name string) { c.SetNode(name, nil) }

// Usage is a node's capacity and what is held on it, slow memory split into the node's own and
// its rack pool's (the whole pool's capacity and reservations).
type Usage struct {
	CPUs, DRAMBytes, LocalSlowBytes, PoolSlowBytes                 int64
	LLCWays                                                        int
	UsedCPUs, UsedDRAMBytes, UsedLocalSlowBytes, UsedPoolSlowBytes int64
	UsedMask                                                       uint64
}

// Usage of a node whose capacity is given; cpus is the CPUs it offers (published or allocatable).
func (c *Cache) Usage(name string, capacity *NodeCapacity, cpus int64) Usage {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.usageLocked(name, capacity, cpus)
}

func (c *Cache) usageLocked(name string, capacity *NodeCapacity, cpus int64) Usage {
	return c.usageOfLocked(c.nodes[name], capacity, cpus)
}

// usageOfLocked is usageLocked for the node's record n (nil: none).
func (c *Cache) usageOfLocked(n *nodeUse, capacity *NodeCapacity, cpus int64) Usage {
	u := Usage{CPUs: cpus, DRAMBytes: capacity.DRAMBytes, LocalSlowBytes: capacity.SlowBytes, LLCWays: capacity.LLCWays}
	if n != nil {
		u.UsedCPUs, u.UsedDRAMBytes, u.UsedLocalSlowBytes, u.UsedMask = n.cpus, n.dram, n.slowLocal, n.mask
	}
	if pool := capacity.SlowPool; pool != "" {
		var rp *rackPool
		if n != nil && n.member == pool {
			rp = n.pool
		} else {
			rp = c.pools[pool]
			// A node whose membership the informer has not delivered yet still counts its own.
			if n != nil {
				u.UsedPoolSlowBytes += n.slowFromPool
			}
		}
		u.PoolSlowBytes = c.poolSizeLocked(pool, rp)
		if rp != nil {
			u.UsedPoolSlowBytes += rp.usedLocked
		}
	}
	return u
}

// Verdict is why a node cannot take a pod; Unresolvable when it never can (its capacity, not
// its load, is too small): the extender protocol's FailedAndUnresolvableNodes.
type Verdict struct {
	Reason       string
	Unresolvable bool
}

// Judge checks, in one fixed order (the first refusal names the reason), whether a node can
// take ask now; nil when it can.
func Judge(u Usage, ask Ask) *Verdict {
	never := func(why string) *Verdict { return &Verdict{"tmc: " + why, true} }
	full := func(why string) *Verdict { return &Verdict{"tmc: " + why, false} }
	slow := float64(ask.SlowBytes)
	switch {
	case float64(u.CPUs) < ask.VCPUs:
		return never(fmt.Sprintf("node has fewer than %g CPUs", ask.VCPUs))
	case float64(u.DRAMBytes) < ask.DRAMBytes:
		return never("node has less DRAM than the configuration")
	case u.LLCWays < ask.LLCWays:
		return never(fmt.Sprintf("node has fewer than %d LLC ways", ask.LLCWays))
	case u.LocalSlowBytes+u.PoolSlowBytes == 0 && slow > 0:
		return never("node has no slow memory tier")
	case float64(u.LocalSlowBytes) < slow && float64(u.PoolSlowBytes) < slow:
		return never("node's slow tier (local or pool) is smaller than the configuration's")
	case float64(u.CPUs-u.UsedCPUs) < ask.VCPUs:
		return full("not enough free CPUs")
	case float64(u.DRAMBytes-u.UsedDRAMBytes) < ask.DRAMBytes:
		return full("not enough free DRAM")
	case float64(u.LocalSlowBytes-u.UsedLocalSlowBytes) < slow && float64(u.PoolSlowBytes-u.UsedPoolSlowBytes) < slow:
		return full("not enough free slow memory (local or rack pool)")
	case BestFitLength(u.UsedMask, u.LLCWays, ask.LLCWays) == 0:
		return full(fmt.Sprintf("no free run of %d contiguous LLC ways (CAT)", ask.LLCWays))
	}
	return nil
}

// Load is the packing score's view of a node: its slow tier is its own when it has one, else its
// rack pool's.
func (u Usage) Load() NodeLoad {
	slow, used := u.LocalSlowBytes, u.UsedLocalSlowBytes
	if slow == 0 {
		slow, used = u.PoolSlowBytes, u.UsedPoolSlowBytes
	}
	return NodeLoad{
		CPUs: float64(u.CPUs), DRAMBytes: float64(u.DRAMBytes), SlowBytes: float64(slow), LLCWays: u.LLCWays,
		UsedCPUs: float64(u.UsedCPUs), UsedDRAMBytes: float64(u.UsedDRAMBytes), UsedSlowBytes: float64(used),
		LLCUsedMask: u.UsedMask,
	}
}

// Assume reserves ask for a pod on a node: the checks again under the lock, slow memory from the node first and else from its rack pool, and a CAT
// run chosen from the bits actually held (best fit; the fallback takes every way of the longest
// free run). Assuming a pod it already holds on the same node changes nothing.
func (c *Cache) Assume(uid types.UID, name string, capacity *NodeCapacity, cpus int64, ask *PodAsk) (Reservation, error) {
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
