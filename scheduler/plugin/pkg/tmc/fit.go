package tmc

// The fit rule: a node's capacity and what is held on it (Usage), and whether a pod's
// configuration fits it now (Judge), the same rule for Filter, Reserve and the extender.

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

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

// UsageWithout is the node's Usage less the bound reservations on it that gone reports gone
// (the pod informer's store no longer holds the pod: deleted, or finished), and whether any
// was: what the node holds as the API server has it, before the informer's handler has
// released them. It only reads.
func (c *Cache) UsageWithout(name string, capacity *NodeCapacity, cpus int64, gone func(types.UID) bool) (Usage, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.usageWithoutLocked(c.nodes[name], capacity, cpus, gone)
}

func (c *Cache) usageWithoutLocked(n *nodeUse, capacity *NodeCapacity, cpus int64, gone func(types.UID) bool) (Usage, bool) {
	u := c.usageOfLocked(n, capacity, cpus)
	if n == nil || gone == nil {
		return u, false
	}
	discounted := false
	var mask uint64
	for uid, held := range n.masks {
		r := c.pods[uid]
		if !r.Bound || !gone(uid) {
			mask |= held
			continue
		}
		discounted = true
		u.UsedCPUs -= r.VCPUs
		u.UsedDRAMBytes -= r.DRAMBytes
		switch {
		case !r.SlowFromPool:
			u.UsedLocalSlowBytes -= r.SlowBytes
		case capacity.SlowPool != "":
			u.UsedPoolSlowBytes -= r.SlowBytes
		}
	}
	if discounted {
		u.UsedMask = mask // rebuilt from the others: an overlapping one keeps its ways
	}
	return u, discounted
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
