package tmcnri

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// NumaNode is one NUMA node as sysfs describes it.
type NumaNode struct {
	ID       int
	CPUs     []int
	MemBytes int64
	Slow     bool  // a slower memory tier: no CPUs of its own, or a higher memory tier number
	Distance []int // to every node, indexed by position in Topology.Nodes
}

// Topology is the machine's NUMA layout, read from <sys>/devices/system/node.
type Topology struct {
	Nodes []NumaNode
}

// Bounds on what sysfs may say, so that a corrupt or hostile tree cannot make a list of a billion
// CPUs: no machine has more CPUs or NUMA nodes than the contract allows.
const (
	maxListItems = 4096
	maxNodeID    = 1023
)

// ParseList reads the kernel's list format ("0-3,8,10-11"), bounded.
func ParseList(text string) ([]int, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("list %q: %q is not a number", clip(text, 40), clip(part, 20))
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("list %q: %q is not a range", clip(text, 40), clip(part, 20))
			}
		}
		if b-a >= maxListItems || len(out)+b-a+1 > maxListItems {
			return nil, fmt.Errorf("list %q: more than %d items", clip(text, 40), maxListItems)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FormatList writes a sorted list of ids in the kernel's list format.
func FormatList(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ids[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func readSmall(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 64*1024) // every sysfs file read here is a few lines
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return "", err
	}
	return string(buf[:n]), nil
}

var (
	memTotal   = regexp.MustCompile(`MemTotal:\s+(\d{1,15})\s*kB`)
	nodeDir    = regexp.MustCompile(`^node(\d{1,4})$`)
	memoryTier = regexp.MustCompile(`^memory_tier(\d{1,6})$`)
)

// ReadTopology reads the NUMA nodes under sys (the host's /sys, or a test's tree).
func ReadTopology(sys string) (*Topology, error) {
	base := filepath.Join(sys, "devices", "system", "node")
	var ids []int
	if online, err := readSmall(filepath.Join(base, "online")); err == nil {
		if ids, err = ParseList(online); err != nil {
			return nil, err
		}
	} else {
		entries, err := os.ReadDir(base)
		if err != nil {
			return nil, fmt.Errorf("no NUMA nodes in sysfs: %w", err)
		}
		for _, e := range entries {
			if m := nodeDir.FindStringSubmatch(e.Name()); m != nil {
				id, _ := strconv.Atoi(m[1])
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
	}
	if len(ids) == 0 || ids[len(ids)-1] > maxNodeID {
		return nil, fmt.Errorf("sysfs lists no NUMA node, or one above %d", maxNodeID)
	}
	tiers := memoryTiers(sys)
	fastest := -1
	for _, t := range tiers {
		if fastest < 0 || t < fastest {
			fastest = t
		}
	}
	topo := &Topology{}
	for _, id := range ids {
		d := filepath.Join(base, fmt.Sprintf("node%d", id))
		cpuText, _ := readSmall(filepath.Join(d, "cpulist"))
		cpus, err := ParseList(cpuText)
		if err != nil {
			return nil, fmt.Errorf("node%d cpulist: %w", id, err)
		}
		var mem int64
		if info, err := readSmall(filepath.Join(d, "meminfo")); err == nil {
			if m := memTotal.FindStringSubmatch(info); m != nil {
				kb, _ := strconv.ParseInt(m[1], 10, 64)
				mem = kb * 1024
			}
		}
		tier, hasTier := tiers[id]
		slow := (len(cpus) == 0 && mem > 0) || (hasTier && fastest >= 0 && tier > fastest)
		n := NumaNode{ID: id, CPUs: cpus, MemBytes: mem, Slow: slow}
		if text, err := readSmall(filepath.Join(d, "distance")); err == nil {
			for _, f := range strings.Fields(text) {
				v, err := strconv.Atoi(f)
				if err != nil || v < 0 || v > 255 || len(n.Distance) >= len(ids) {
					return nil, fmt.Errorf("node%d distance %q is not a row of small numbers", id, clip(text, 60))
				}
				n.Distance = append(n.Distance, v)
			}
		}
		topo.Nodes = append(topo.Nodes, n)
	}
	return topo, nil
}

func memoryTiers(sys string) map[int]int {
	out := map[int]int{}
	base := filepath.Join(sys, "devices", "virtual", "memory_tiering")
	entries, err := os.ReadDir(base)
	if err != nil {
		return out
	}
	for _, e := range entries {
		m := memoryTier.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		tier, _ := strconv.Atoi(m[1])
		text, _ := readSmall(filepath.Join(base, e.Name(), "nodelist"))
		nodes, err := ParseList(text)
		if err != nil {
			continue
		}
		for _, n := range nodes {
			out[n] = tier
		}
	}
	return out
}

// distance between two nodes given by position; a missing row counts the local distance for a
// node to itself and the kernel's remote default otherwise.
func (t *Topology) distance(from, to int) int {
	row := t.Nodes[from].Distance
	if to < len(row) {
		return row[to]
	}
	if from == to {
		return 10
	}
	return 20
}

// Capacity is the node's DRAM and slow memory in bytes.
func (t *Topology) Capacity() (dram, slow int64) {
	for _, n := range t.Nodes {
		if n.Slow {
			slow += n.MemBytes
		} else {
			dram += n.MemBytes
		}
	}
	return dram, slow
}

// Nearest picks the memory nodes for a container running on cpus (all online CPUs when empty):
// the DRAM nodes those CPUs belong to, and the slow node nearest them (the smallest distance
// from the farthest of them; the lower id on a tie). slow is -1 when the machine has no slow
// node. A CPU no node lists is ignored; if none is listed, every DRAM node is used.
func (t *Topology) Nearest(cpus []int) (dram []int, slow int) {
	home := map[int]bool{}
	for i, n := range t.Nodes {
		if n.Slow {
			continue
		}
		for _, c := range n.CPUs {
			if len(cpus) == 0 || slices.Contains(cpus, c) {
				home[i] = true
				break
			}
		}
	}
	if len(home) == 0 {
		for i, n := range t.Nodes {
			if !n.Slow && n.MemBytes > 0 {
				home[i] = true
			}
		}
	}
	for i := range t.Nodes {
		if home[i] {
			dram = append(dram, t.Nodes[i].ID)
		}
	}
	slow, best := -1, 0
	for j, n := range t.Nodes {
		if !n.Slow {
			continue
		}
		far := 0
		for i := range home {
			far = max(far, t.distance(i, j))
		}
		if slow < 0 || far < best {
			slow, best = n.ID, far
		}
	}
	return dram, slow
}
