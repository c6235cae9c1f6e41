package tmcnri

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Resctrl is the kernel's resctrl filesystem (/sys/fs/resctrl), or a test's tree of plain files.
// The runtime creates a container's resctrl group from the runtime spec (intelRdt.closID and its
// schemata), but runtimes older than the schemata field (runc before 1.3 reads only
// l3CacheSchema, which NRI cannot set) only join an existing group by its closID: so the plugin
// makes the group with the pod's schema before the container is created, and both kinds of
// runtime end with the pod's threads in the pod's ways.
type Resctrl struct{ Root string }

// GroupPrefix names the groups the node makes for placed pods (the agent's prefix, so an agent
// and the plugin agree on what is tmc's).
const GroupPrefix = "tmc-pod-"

var l3Line = regexp.MustCompile(`(?m)^\s*L3:(.+)$`)

// CAT is what L3 cache allocation offers on this node.
type CAT struct {
	CBM      uint64
	MinBits  int
	CacheIDs []string
}

// ErrNoCAT says the node has no L3 CAT through resctrl.
var ErrNoCAT = errors.New("no L3 CAT through resctrl on this node")

// Info reads the node's CAT capabilities; ErrNoCAT when resctrl is not mounted or has no L3.
func (r *Resctrl) Info() (*CAT, error) {
	if r == nil || r.Root == "" {
		return nil, ErrNoCAT
	}
	cbmText, err := readSmall(filepath.Join(r.Root, "info", "L3", "cbm_mask"))
	if err != nil {
		return nil, ErrNoCAT
	}
	cbm, err := strconv.ParseUint(strings.TrimSpace(cbmText), 16, 64)
	if err != nil || cbm == 0 {
		return nil, fmt.Errorf("resctrl cbm_mask %q is not a hex mask", clip(cbmText, 20))
	}
	minBits := 1
	if text, err := readSmall(filepath.Join(r.Root, "info", "L3", "min_cbm_bits")); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(text)); err == nil && v >= 1 && v <= 64 {
			minBits = v
		}
	}
	schemata, _ := readSmall(filepath.Join(r.Root, "schemata"))
	m := l3Line.FindStringSubmatch(schemata)
	if m == nil {
		return nil, ErrNoCAT
	}
	var ids []string
	for _, part := range strings.Split(m[1], ";") {
		if id, _, ok := strings.Cut(part, "="); ok {
			if _, err := strconv.Atoi(strings.TrimSpace(id)); err != nil {
				return nil, fmt.Errorf("resctrl schemata domain %q is not a cache id", clip(id, 20))
			}
			ids = append(ids, strings.TrimSpace(id))
		}
	}
	if len(ids) == 0 || len(ids) > 64 {
		return nil, ErrNoCAT
	}
	return &CAT{CBM: cbm, MinBits: minBits, CacheIDs: ids}, nil
}

// Schemata is the L3 line that gives mask on every cache domain.
func (c *CAT) Schemata(mask uint64) (string, error) {
	if mask&^c.CBM != 0 || !contiguous(mask) || bits.OnesCount64(mask) < c.MinBits {
		return "", fmt.Errorf("mask %#x is not a contiguous run of at least %d ways within cbm_mask %#x",
			mask, c.MinBits, c.CBM)
	}
	parts := make([]string, len(c.CacheIDs))
	for i, id := range c.CacheIDs {
		parts[i] = fmt.Sprintf("%s=%x", id, mask)
	}
	return "L3:" + strings.Join(parts, ";"), nil
}

// EnsureGroup makes the group name hold schemata (writing only what differs).
func (r *Resctrl) EnsureGroup(name, schemata string) error {
	_, err := r.ensureGroup(name, schemata)
	return err
}

// ensureGroup is EnsureGroup, saying whether it changed anything.
func (r *Resctrl) ensureGroup(name, schemata string) (bool, error) {
	dir := filepath.Join(r.Root, name)
	made := true
	if err := os.Mkdir(dir, 0o755); errors.Is(err, os.ErrExist) {
		made = false
	} else if err != nil {
		// ENOSPC: every CLOSID is taken (info/L3/num_closids).
		return false, fmt.Errorf("cannot create resctrl group %s: %w", name, err)
	}
	current, _ := readSmall(filepath.Join(dir, "schemata"))
	for _, line := range strings.Split(current, "\n") {
		if strings.TrimSpace(line) == schemata {
			return made, nil
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "schemata"), []byte(schemata+"\n"), 0o644); err != nil {
		return made, fmt.Errorf("resctrl refused schemata %q for %s: %w", schemata, name, err)
	}
	return true, nil
}

// RemoveGroup deletes a pod's group (its threads return to the default group).
func (r *Resctrl) RemoveGroup(name string) error {
	if r == nil || r.Root == "" {
		return nil
	}
	dir := filepath.Join(r.Root, name)
	err := os.Remove(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// A test's tree of plain files keeps its files; resctrl's kernfs removes them itself.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return os.Remove(dir)
}
