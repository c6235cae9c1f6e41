package tmcnri

import (
	"slices"
)

// Adjustment is what a placement makes of a placed pod's container on this node, as a value:
// Adjust alone computes it, and every path that applies a placement applies this value as far
// as its moment allows: container creation (CreateContainer) all of it, the runtime's
// synchronisation (Synchronize) the memory limit and memory nodes of a container created
// without the plugin, and the reconcile mode (Reconciler) the memory limit, memory nodes and LLC
// ways of a running pod's cgroup for runtimes without NRI. Whatever cannot be given says why in
// its *Unapplied field.
type Adjustment struct {
	// Group is the pod's resctrl group (one CLOS per pod, shared by its containers) and Schemata
	// the L3 line that gives it the placement's ways; Schemata is "" when the node cannot give
	// them (LLCUnapplied says why).
	Group        string
	Schemata     string
	LLCUnapplied string
	// Mems are the memory nodes (cpuset.mems): the DRAM nodes of the container's CPUs, and the
	// slow node nearest them when the pod was given slow memory; empty when the node has none to
	// name (MemsUnapplied says why).
	Mems          []int
	MemsUnapplied string
	// MemoryLimit is the limit the placement sets (MemoryLimit's rule); 0: it sets none, and the
	// container keeps its own.
	MemoryLimit int64
	// PlanFile is the plan's file name under the node's plan directory and Plan its text (the
	// allocator shim reads it); Plan is "" when there is no fast node to name (PlanUnapplied says
	// why).
	PlanFile      string
	Plan          string
	PlanUnapplied string
}

// NodeLayout is what Adjust knows of this node: its NUMA topology and its L3 cache allocation,
// both read by the caller (ReadNodeLayout), so that Adjust reads nothing itself.
type NodeLayout struct {
	Topology *Topology // nil: the topology could not be read (NoTopology says why)
	CAT      *CAT      // nil: no L3 CAT (NoCAT says why)

	NoTopology string
	NoCAT      string
}

// ReadNodeLayout reads the node's NUMA topology under sys and its CAT through resctrl (nil or
// unmounted: no CAT). err is the topology's: a node whose memory nodes are unknown can apply
// nothing but a memory limit.
func ReadNodeLayout(sys string, resctrl *Resctrl) (NodeLayout, error) {
	var node NodeLayout
	topo, err := ReadTopology(sys)
	if err != nil {
		node.NoTopology = "the node's NUMA topology cannot be read: " + err.Error()
	} else {
		node.Topology = topo
	}
	if cat, catErr := resctrl.Info(); catErr != nil {
		node.NoCAT = catErr.Error()
	} else {
		node.CAT = cat
	}
	return node, err
}

// Target is the container (or, in the reconcile mode, the pod's cgroup) an adjustment is for.
type Target struct {
	Pod string // namespace/name, as the plan file names it
	UID string // the pod's uid
	// CPUs the container runs on; nil when it names none (or they cannot be read): all the
	// node's CPUs, a safe superset.
	CPUs []int
	// OwnLimit is the memory limit the pod's spec gives the container (0 for none).
	OwnLimit int64
	// Group is the resctrl group the ways are given in; "" for the pod's own (GroupPrefix and
	// its uid). A DRA claim's containers share the claim's group (DRAGroup).
	Group string
}

// Adjust is the one rule from a placement and the node's layout to what a container is given.
// It reads and writes nothing: the same placement on the same node gives the same value to
// every path that applies it.
func Adjust(pl *Placement, node NodeLayout, t Target) Adjustment {
	adj := Adjustment{Group: GroupPrefix + t.UID, PlanFile: t.UID + ".plan"}
	if t.Group != "" {
		adj.Group = t.Group
	}

	// LLC ways.
	if node.CAT == nil {
		adj.LLCUnapplied = node.NoCAT
	} else if schemata, err := node.CAT.Schemata(pl.LLCMaskBits()); err != nil {
		adj.LLCUnapplied = err.Error()
	} else {
		adj.Schemata = schemata
	}

	// Memory: the placement's bytes for a container without a limit of its own.
	if limit, ok := MemoryLimit(pl, t.OwnLimit); ok {
		adj.MemoryLimit = limit
	}

	if node.Topology == nil {
		adj.MemsUnapplied = node.NoTopology
		adj.PlanUnapplied = node.NoTopology
		return adj
	}
	dramNodes, slowNode := node.Topology.Nearest(t.CPUs)

	// NUMA: the DRAM nodes of the container's CPUs, and the slow node nearest them when the pod
	// was given slow memory.
	mems := slices.Clone(dramNodes)
	if pl.Configuration.SlowBytes > 0 && slowNode >= 0 && !slices.Contains(mems, slowNode) {
		mems = append(mems, slowNode)
		slices.Sort(mems)
	}
	if len(mems) == 0 {
		adj.MemsUnapplied = "no DRAM NUMA node with memory"
	} else {
		adj.Mems = mems
	}

	// The plan. Without a slow node everything is DRAM: the plan names the DRAM node twice, so
	// the shim's per-structure limits are moot but the pod runs the same way.
	if len(dramNodes) > 0 {
		slow := slowNode
		if slow < 0 || pl.Configuration.SlowBytes == 0 {
			slow = dramNodes[0]
		}
		adj.Plan = RenderPlan(pl, dramNodes[0], slow, t.Pod+" "+t.UID)
	} else {
		adj.PlanUnapplied = "no DRAM NUMA node to name as the fast node"
	}
	return adj
}
