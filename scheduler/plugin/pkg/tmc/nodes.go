package tmc

// What a node's metadata says: its tiered capacity, the CPUs it offers, its machine pattern and
// whether it is ready, parsed once per object version.

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// nodeCapacity is a node's tiered capacity and the CPUs it offers: tmc.dev/cpus, else its
// allocatable CPUs (whole, at least one), as the extender counts them. Filter and Score read it
// through the cache (Cache.State), which parses a node once per object version.
func nodeCapacity(node *v1.Node) (*NodeCapacity, int64, error) {
	return parseNodeCapacity(node)
}

// parsedNode is what a node's metadata says at one object version: its capacity, CPUs and
// machine pattern (nil for none or an unreadable one, logged once per version: a preference
// lost, never a node).
type parsedNode struct {
	version  string
	capacity *NodeCapacity
	cpus     int64
	err      error
	pattern  *NodePattern
	// ready: nodeReady at this version (its conditions and cordon are part of the object).
	ready bool
}

// parseNode is what the node's metadata says, an unreadable pattern logged: the node handler's
// parse, once per version delivered.
func parseNode(node *v1.Node) *parsedNode {
	p, patternErr := readNode(node)
	if patternErr != nil {
		klog.ErrorS(patternErr, "unreadable machine pattern; the node is placed on as if it had none", "node", klog.KObj(node))
	}
	return &p
}

// readNode is parseNode without the log, and the pattern's error returned: a scheduling cycle
// reads a version the node handler has not delivered on every call until it does, and the
// handler logs it then.
func readNode(node *v1.Node) (parsedNode, error) {
	p := parsedNode{version: node.ResourceVersion, ready: nodeReady(node)}
	p.capacity, p.cpus, p.err = parseNodeCapacity(node)
	var patternErr error
	if _, ok := node.Annotations[PatternAnnotation]; ok {
		p.pattern, patternErr = ParsePattern(node.Annotations)
	}
	return p, patternErr
}

// ReadNodeCapacity is a node's tiered capacity as the engine reads it (its labels and tmc.dev
// annotations, held to the memory its kubelet reports): nil and no error for a node that
// publishes none, an error for one whose capacity cannot be read.
func ReadNodeCapacity(node *v1.Node) (*NodeCapacity, error) {
	c, _, err := parseNodeCapacity(node)
	return c, err
}

func parseNodeCapacity(node *v1.Node) (*NodeCapacity, int64, error) {
	capacity, err := ParseNodeCapacity(node.Labels, node.Annotations)
	if err != nil || capacity == nil {
		return nil, 0, err
	}
	if err := withinKubeletMemory(capacity, node.Status.Capacity); err != nil {
		return nil, 0, err
	}
	if capacity.DRAMBytes < 1 {
		// Readable, but no machine: nothing tiered fits it, and the mirror (scheduler.feeder)
		// reads it so too.
		return nil, 0, contractErrorf("node capacity: no DRAM published: it can hold no tiered pod")
	}
	cpus := capacity.CPUs
	if cpus == 0 {
		var err error
		if cpus, err = allocatableCPUs(node.Status.Allocatable); err != nil {
			return nil, 0, err
		}
	}
	return capacity, cpus, nil
}

// withinKubeletMemory holds what a node's agent publishes to what its kubelet reports: the DRAM
// and node-local slow memory a node publishes are memory the kernel has (slow memory onlined as
// CPU-less NUMA nodes counts in it), so together they cannot exceed the kubelet's memory
// capacity, with 1 % for rounding. An agent's token writes only its node's annotations, never
// the kubelet's status: a node publishing 4 PiB is unreadable, not a home for a 1 PiB pod. A
// node whose kubelet reports no memory is not checked.
func withinKubeletMemory(c *NodeCapacity, reported v1.ResourceList) error {
	q, ok := reported[v1.ResourceMemory]
	if ok && q.Sign() < 0 {
		return contractErrorf("node capacity: its kubelet reports %s of memory", q.String())
	}
	if !ok || q.Sign() == 0 {
		return nil
	}
	// Compared before it is read as an int64: Value() wraps past 2^63 bytes ("1e30").
	if q.CmpInt64(2*MaxBytes) >= 0 {
		return nil // more than any publishable capacity (each of the two is below MaxBytes)
	}
	memory := q.Value()
	if c.DRAMBytes+c.SlowBytes > memory+memory/100 {
		return contractErrorf("node capacity: %d bytes of DRAM and %d of node-local slow memory published, more than the %s of memory its kubelet reports",
			c.DRAMBytes, c.SlowBytes, q.String())
	}
	return nil
}

// allocatableCPUs is the kubelet's allocatable CPUs, whole, at least one, held to MaxCPUs before
// they are read in millicores (10^18 CPUs, "1E", is past an int64 of them).
func allocatableCPUs(alloc v1.ResourceList) (int64, error) {
	q, ok := alloc[v1.ResourceCPU]
	if !ok {
		return 1, nil
	}
	if q.Sign() < 0 {
		return 0, contractErrorf("node capacity: its kubelet reports %s allocatable CPUs", q.String())
	}
	if q.CmpInt64(MaxCPUs) >= 0 {
		return MaxCPUs, nil
	}
	return max(1, q.MilliValue()/1000), nil
}

// nodeReady is what the extender counts as ready: the Ready condition True and the node not
// cordoned. kube-scheduler leaves both to other plugins (the not-ready taint to TaintToleration,
// spec.unschedulable to NodeUnschedulable), so a pod that tolerates the taint, or a profile
// without those plugins, would otherwise be placed where the extender never places one.
func nodeReady(node *v1.Node) bool {
	if node.Spec.Unschedulable {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
