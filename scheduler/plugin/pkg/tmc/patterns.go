package tmc

// The machine-pattern rule, ported from model/patterns.py so that the plugin and the extender
// prefer the same nodes. A node's pattern (tmc.dev/pattern) is a capacity plan's machine: so many
// VMs of each workload in each configuration. A pod is preferred on a node whose pattern still
// has room for its workload:
//
//	PreferExact     room for the workload, and the slot of exactly its configuration not full
//	PreferWorkload  room for the workload in another configuration
//	PreferNone      no pattern, or no room for the workload in it
//
// "Room for the workload" is its slots' counts minus every pod of it bound on the node. Combined
// with the packing score over the nodes that passed Filter (NormalizeScore): the nodes at the
// highest preference present keep their packing score (at least 1), the others score 0; with no
// preference anywhere, the packing scores are unchanged.

const (
	PreferNone     = 0
	PreferWorkload = 1
	PreferExact    = 2
	// scoreBase separates the preference and the packing score in Score's raw value
	// (preference * scoreBase + packing, at most 32), which NormalizeScore turns into the score.
	scoreBase = MaxPackingScore + 1
)

// PlacedKey is what a placed pod is counted by against a node's pattern: its workload and its
// configuration (DRAM, slow memory, ways).
type PlacedKey struct {
	Workload  string
	DRAMBytes int64
	SlowBytes int64
	LLCWays   int
}

// Preference is model.patterns.preference: how much a node with pattern and the pods placed on
// it (by key) is preferred for a pod counted as pod.
func Preference(pattern *NodePattern, placed map[PlacedKey]int, pod *PlacedKey) int {
	if pattern == nil || pod == nil || pod.Workload == "" {
		return PreferNone
	}
	planned, exact := 0, false
	for _, s := range pattern.Slots {
		if s.Workload != pod.Workload {
			continue
		}
		planned += s.Count
		if slotKey(s) == *pod && placed[*pod] < s.Count {
			exact = true
		}
	}
	if planned == 0 {
		return PreferNone
	}
	here := 0
	for key, n := range placed {
		if key.Workload == pod.Workload && n > 0 {
			here += n
		}
	}
	switch {
	case here >= planned:
		return PreferNone
	case exact:
		return PreferExact
	}
	return PreferWorkload
}

// Combine is model.patterns.combine: the scores 0..MaxPackingScore of the nodes a pod may go
// to, from each one's preference and packing score.
func Combine(preferences, packing []int) []int {
	top := PreferNone
	for _, p := range preferences {
		top = max(top, p)
	}
	out := make([]int, len(packing))
	for i, s := range packing {
		switch {
		case top == PreferNone:
			out[i] = s
		case preferences[i] == top:
			out[i] = min(MaxPackingScore, max(1, s))
		}
	}
	return out
}
