package tmc

// A node's record and the view of it that Filter and Score read without a lock: every writer
// publishes the views it changed as it releases the lock, so a reader sees each change whole.
// Readers never write: the node handler makes a node's record and indexes it by the object it
// delivers, and a scheduling cycle that holds an object the handler has not delivered judges it
// as it is, keeping nothing.

import (
	"math"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

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
	// version, or a copy) judges the object it holds (stateOf).
	obj *v1.Node
	// usage is the node's capacity and what its reservations hold; for a pooled node, the
	// pool's size and usage are read from pool when the node is judged.
	usage Usage
	pool  *rackPool
	// locked: the node's metadata names a rack pool that its informer membership does not
	// (one of the two is not delivered yet): read it under the lock, as the rare case it is.
	locked bool
	// informed: obj came from an informer (it has a resourceVersion). A test's object, which it
	// may change in place between calls, is parsed on each read instead.
	informed bool
	placed   map[PlacedKey]int
}

// idle: nothing held, no pool membership, nothing parsed: the record can go.
func (n *nodeUse) idle() bool { return len(n.masks) == 0 && n.member == "" && n.parsed == nil }

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
// metadata parsed once per object version by the node handler and kept in the node's record.
// Filter and Score call it for every node, from kube-scheduler's 16 goroutines: it reads the
// node's published view without a lock, and writes nothing. What a writer changed is published
// before the writer returns, so the next pod's Filter sees the reservation Reserve made for the
// one before.
//
// The view is looked up before the node object is read at all: at 20,000 nodes most objects a
// Filter asks about are out of the CPU's caches, and reading one cost a fifth of this function.
func (c *Cache) State(node *v1.Node, pod PlacedKey, counted bool) NodeState {
	if v := c.published(node); v != nil {
		return v.state(pod, counted)
	}
	return c.stateOf(node, pod, counted)
}

// published is the view a reader holding node reads without the lock: nil when the node handler
// has not delivered this object (or its view must be read under the lock, or it is a test's).
func (c *Cache) published(node *v1.Node) *nodeView {
	x := c.index.Load()
	n := x.all[node]
	if n == nil && len(x.recent) > 0 {
		n = x.recent[node]
	}
	if n != nil {
		if v := n.view.Load(); v != nil && v.obj == node && v.informed && !v.locked {
			return v
		}
	}
	return nil
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

// stateOf is State for a node object the cache publishes no view of: one the node handler has
// not delivered (a node new to the cache, a version newer or older than the cache's, the cache's
// version in another object: a relist, the extender's decoded nodes), one pooled where the
// informer's membership does not say so yet, or a test's object. kube-scheduler's snapshot and
// the engine's handler follow the same informer at their own pace, so a cycle may hold either
// side of a change for a moment. The cycle's object is judged as it is, with what the cache holds
// on the node by name, and nothing is kept: the cache's version parsed already when it is the
// same (an informer's object is never changed in place), else the object read here, and the
// handler records the node when it delivers the object. Filter thus never writes, and Reserve,
// which reads the same object, agrees with it.
func (c *Cache) stateOf(node *v1.Node, pod PlacedKey, counted bool) NodeState {
	c.mu.RLock()
	if n := c.nodes[node.Name]; n != nil && n.parsed != nil && node.ResourceVersion != "" && n.parsed.version == node.ResourceVersion {
		defer c.mu.RUnlock()
		return c.stateLocked(n, n.parsed, pod, counted)
	}
	c.mu.RUnlock()
	// Read outside the lock (a pattern takes a while to parse, and a waiting writer holds off
	// every reader); the reservations are read after it, as they are then.
	p, _ := readNode(node)
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.stateLocked(c.nodes[node.Name], &p, pod, counted)
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
	if len(c.moved) > 0 {
		c.indexLocked()
	}
	c.mu.Unlock()
}

// viewLocked is the node's record as readers are to see it now (nil: not parsed).
func (c *Cache) viewLocked(n *nodeUse) *nodeView {
	p := n.parsed
	if p == nil {
		return nil
	}
	v := &nodeView{parsed: *p, obj: n.obj, placed: n.placed, informed: n.obj != nil && n.obj.ResourceVersion != ""}
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

// nodeIndex is the node records by the object a reader holds, found without the lock and
// without reading the object (its address is the key). Never changed once published: writers
// publish a new one. all holds every record by its object when all was made; recent, the records
// given another object since (by the node handler), by that object. A reader looks in all, then
// in recent.
type nodeIndex struct {
	all, recent map[*v1.Node]*nodeUse
}

// recentBound is how many records recent holds before all is made anew. Each object the node
// handler delivers copies recent, and every bound-th makes all anew (every node), so a delivery
// costs about nodes/bound + bound/2 entries: least at the square root of 2*nodes (200 at 20,000
// nodes, where making all anew at each delivery would cost 20,000).
func recentBound(nodes int) int {
	return max(16, int(math.Sqrt(float64(2*nodes))))
}

// indexLocked publishes the index with the records given another object (or none) under the
// lock: recent copied without the keys of records that have moved on, and with theirs. all is
// made anew when recent passes its bound, when all names another record by one of their objects
// (a node dropped and recorded again from the same object), or when an eighth of all's keys are
// stale (drift): all keeps the objects it names alive, so at most an eighth of the node
// informer's objects are held twice.
func (c *Cache) indexLocked() {
	x := c.index.Load()
	recent := make(map[*v1.Node]*nodeUse, len(x.recent)+len(c.moved))
	for obj, n := range x.recent {
		if n.obj == obj {
			recent[obj] = n
		}
	}
	anew := c.drift > len(c.nodes)/8
	for _, n := range c.moved {
		if n.obj == nil {
			continue // forgotten: nothing to find it by
		}
		switch held := x.all[n.obj]; held {
		case n: // all finds it by this object already
		case nil:
			recent[n.obj] = n
		default:
			anew = true
		}
	}
	clear(c.moved)
	c.moved = c.moved[:0]
	if anew || len(recent) > recentBound(len(c.nodes)) {
		c.reindexLocked()
		return
	}
	c.index.Store(&nodeIndex{all: x.all, recent: recent})
}

// reindexLocked makes all anew from the records as they are, recent empty.
func (c *Cache) reindexLocked() {
	all := make(map[*v1.Node]*nodeUse, len(c.nodes))
	for _, n := range c.nodes {
		if n.obj != nil {
			all[n.obj] = n
		}
	}
	c.index.Store(&nodeIndex{all: all})
	c.drift = 0
}

// recordLocked is the node's record, made when there is none. The index may still hold a
// record dropped for the name, under its last object: its view is gone (nil), so a reader that
// finds it judges the object it holds (stateOf), reading this one.
func (c *Cache) recordLocked(name string) *nodeUse {
	n := c.nodes[name]
	if n == nil {
		n = &nodeUse{}
		c.nodes[name] = n
	}
	return n
}

// dropLocked forgets an idle record (one with no object: the index finds it by none it holds).
func (c *Cache) dropLocked(name string, n *nodeUse) {
	delete(c.nodes, name)
	c.touchLocked(n) // its view goes
}

// moveLocked gives a record another node object (nil: none), which readers find it by once the
// writer publishes the index.
func (c *Cache) moveLocked(n *nodeUse, obj *v1.Node) {
	if n.obj != nil {
		c.drift++ // all's key for it, if it has one, is stale
	}
	n.obj = obj
	c.moved = append(c.moved, n)
}

// Observed records a node's object as its informer delivers it, with its metadata parsed: the
// node's view and the index follow the object at once, and the record does not keep the object it
// replaces alive (only all does, until it is made anew: at most an eighth of the nodes). The node
// handler is the only writer of a node's record's metadata.
func (c *Cache) Observed(node *v1.Node, parsed *parsedNode) {
	c.mu.Lock()
	defer c.unlock()
	n := c.recordLocked(node.Name)
	if n.obj == node {
		return
	}
	n.parsed = parsed
	c.moveLocked(n, node)
	c.touchLocked(n)
}

// ForgetNode drops what was parsed of a deleted node (its reservations go with its pods).
func (c *Cache) ForgetNode(name string) {
	c.mu.Lock()
	defer c.unlock()
	if n := c.nodes[name]; n != nil {
		n.parsed = nil
		if n.obj != nil {
			c.moveLocked(n, nil)
		}
		c.touchLocked(n)
		if n.idle() {
			c.dropLocked(name, n)
		}
	}
}
