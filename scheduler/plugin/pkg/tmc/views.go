package tmc

// A node's record and the view of it that Filter and Score read without a lock: every writer
// publishes the views it changed as it releases the lock, so a reader sees each change whole.

import (
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
	// version) takes the locked path.
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
// metadata parsed once per object version and kept in the node's record. Filter and Score call
// it for every node, from kube-scheduler's 16 goroutines: it reads the node's published view
// without a lock. What a writer changed is published before the writer returns, so the next
// pod's Filter sees the reservation Reserve made for the one before.
//
// The view is looked up before the node object is read at all: at 20,000 nodes most objects a
// Filter asks about are out of the CPU's caches, and reading one cost a fifth of this function.
func (c *Cache) State(node *v1.Node, pod PlacedKey, counted bool) NodeState {
	idx := c.index.Load()
	if n := (*idx)[node]; n != nil {
		if v := n.view.Load(); v != nil && v.obj == node && v.informed && !v.locked {
			return v.state(pod, counted)
		}
	}
	if node.ResourceVersion == "" {
		// Not from an informer (tests): parsed each time, nothing kept.
		p := parseNode(node)
		c.mu.RLock()
		defer c.mu.RUnlock()
		return c.stateLocked(c.nodes[node.Name], p, pod, counted)
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
