package tmc

// Rack pools: the slow memory a pool's member nodes share, its size (the operator's, else the
// smallest its members claim) and what their reservations take from it, kept as running sums.

import (
	"sync/atomic"
)

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

// RemoveNode forgets a node's pool membership (its pods' reservations go with the pods).
func (c *Cache) RemoveNode(name string) { c.SetNode(name, nil) }
