// Package drapublish keeps a cluster's ResourceSlices of the driver tmc.dev equal to what
// package dra makes of its nodes' published tiered capacity: the slices each node should have
// (Desired), what to create, update and delete to get there from what is stored (Diff), and a
// loop that does it whenever a node or a slice changes (Publisher). With tenant namespaces
// given, the same loop also keeps a ResourceClaimTemplate per published TieredRecommendation in
// each of them (DesiredTemplates, DiffTemplates), as a second key of its queue.
package drapublish

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tmc.dev/scheduler-plugin/pkg/dra"
	"tmc.dev/scheduler-plugin/pkg/tmc"
)

// HostnameLabel is the label a rack pool's slice selects its member nodes by: the kubelet sets
// it on every node, and a node's value names that node alone unless another node carries it too.
const HostnameLabel = corev1.LabelHostname

// Skipped is why a node publishes nothing: its capacity cannot be read, or makes no valid slice.
type Skipped struct {
	Node   string
	Reason error
}

// Desired is every slice the nodes should have: each tiered node's own (owned by its Node, so
// that they go with it) and one per rack pool its members name, selecting the members by their
// HostnameLabel. A node that publishes no capacity has none; one whose capacity cannot be read
// or is out of range has none and is in the skipped list. pools is the operator's pool sizes
// (the chart's rackPools); an invalid one is an error for the whole set. The slices' generation
// is opts.Generation: Diff sets the one each pool is written at.
func Desired(nodes []*corev1.Node, pools map[string]int64, opts dra.Options) ([]resourceapi.ResourceSlice, []Skipped, error) {
	sorted := append([]*corev1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var accepted []dra.Node
	var skipped []Skipped
	byName := map[string]*corev1.Node{}
	for _, n := range sorted {
		c, err := tmc.ReadNodeCapacity(n)
		if err != nil {
			skipped = append(skipped, Skipped{Node: n.Name, Reason: err})
			continue
		}
		if c == nil {
			continue
		}
		if _, err := dra.NodeSlices(n.Name, *c, opts); err != nil {
			skipped = append(skipped, Skipped{Node: n.Name, Reason: err})
			continue
		}
		accepted = append(accepted, dra.Node{Name: n.Name, Capacity: *c})
		byName[n.Name] = n
	}
	all, err := dra.ClusterSlices(accepted, pools, opts)
	if err != nil {
		return nil, skipped, err
	}
	members := map[string][]string{}
	for _, n := range accepted {
		if n.Capacity.SlowPool != "" {
			members[n.Capacity.SlowPool] = append(members[n.Capacity.SlowPool], n.Name)
		}
	}
	hostnames := memberHostnames(sorted, members)
	out := make([]resourceapi.ResourceSlice, 0, len(all))
	for _, s := range all {
		if s.Spec.NodeName != nil {
			node := byName[*s.Spec.NodeName]
			s.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}}
			out = append(out, s)
			continue
		}
		pool := s.Spec.Pool.Name[len(dra.RackPoolPrefix):]
		values := hostnames[pool]
		if len(values) == 0 {
			// No member can be told apart by its hostname label: the pool reaches no node.
			continue
		}
		s.Spec.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: HostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: values,
			}},
		}}}
		out = append(out, s)
	}
	return out, skipped, nil
}

// memberHostnames is, for each pool, the HostnameLabel values of its members that no node
// outside the pool carries (such a value would select that node too), sorted.
func memberHostnames(nodes []*corev1.Node, members map[string][]string) map[string][]string {
	poolOf := map[string]string{}
	for pool, names := range members {
		for _, n := range names {
			poolOf[n] = pool
		}
	}
	// The pools each hostname value would select a node of ("" for a node in no pool).
	reach := map[string]map[string]bool{}
	for _, n := range nodes {
		v, ok := n.Labels[HostnameLabel]
		if !ok || v == "" {
			continue
		}
		if reach[v] == nil {
			reach[v] = map[string]bool{}
		}
		reach[v][poolOf[n.Name]] = true
	}
	out := map[string][]string{}
	for _, n := range nodes {
		pool, ok := poolOf[n.Name]
		v := n.Labels[HostnameLabel]
		if !ok || v == "" || len(reach[v]) != 1 {
			continue
		}
		out[pool] = append(out[pool], v)
	}
	for pool, values := range out {
		sort.Strings(values)
		out[pool] = dedup(values)
	}
	return out
}

func dedup(sorted []string) []string {
	out := sorted[:0]
	for i, v := range sorted {
		if i == 0 || v != sorted[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Unselectable is the members of rack pools that their pool's slice cannot select: no
// HostnameLabel, or one a node outside the pool carries too. The publisher logs them.
func Unselectable(nodes []*corev1.Node, desired []resourceapi.ResourceSlice) []string {
	selected := map[string]bool{}
	for _, s := range desired {
		if s.Spec.NodeSelector == nil {
			continue
		}
		pool := s.Spec.Pool.Name[len(dra.RackPoolPrefix):]
		for _, v := range s.Spec.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values {
			selected[pool+"\x00"+v] = true
		}
	}
	var out []string
	for _, n := range nodes {
		c, err := tmc.ReadNodeCapacity(n)
		if err != nil || c == nil || c.SlowPool == "" {
			continue
		}
		if !selected[c.SlowPool+"\x00"+n.Labels[HostnameLabel]] {
			out = append(out, fmt.Sprintf("%s (pool %s)", n.Name, c.SlowPool))
		}
	}
	sort.Strings(out)
	return out
}
