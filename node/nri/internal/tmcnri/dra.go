package tmcnri

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

// A DRA allocation reaches a container in two steps. The node plugin (tmc-dra-node) prepares the
// claim: it turns the granted count of ways into a run (dra.Compact), keeps it with the claim's
// memory in the node's checkpoint, and gives the kubelet a CDI device whose only edit is the
// environment variable DRAClaimEnv naming the claim. containerd applies CDI edits while it
// builds the container's spec, before NRI's CreateContainer, so this plugin sees the variable,
// reads the claim from the checkpoint, and applies it with the same rule as a placement
// (Adjust).
const (
	// DRAClaimEnv names the prepared claim (its uid) in a container's environment.
	DRAClaimEnv = "TMC_DRA_ALLOCATION"
	// DRAGroupPrefix names a claim's resctrl group: one CLOS per claim, shared by the
	// containers of the pods it is reserved for.
	DRAGroupPrefix = "tmc-claim-"
	// DRACheckpointName is the checkpoint's file name in the node plugin's data directory.
	DRACheckpointName = "checkpoint.json"
	// DefaultDRACheckpoint is where tmc-dra-node keeps it under the kubelet's default plugin
	// directory.
	DefaultDRACheckpoint = "/var/lib/kubelet/plugins/tmc.dev/" + DRACheckpointName

	draCheckpointVersion = 1
	// maxDRACheckpointBytes bounds the file: at most MaxLLCWays claims (each holds a way), each
	// with a few hundred bytes of names.
	maxDRACheckpointBytes = 1 << 20
	// maxDRAPods bounds the pods one claim is reserved for (the API's own limit is 256).
	maxDRAPods = 256
)

// DRAClaim is one prepared claim as the checkpoint keeps it.
type DRAClaim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the uids the claim was reserved for when it was prepared: only their containers
	// may take its configuration.
	Pods []string `json:"pods"`
	// Run is the claim's ways on this node (after the last compaction).
	Run          dra.Run `json:"run"`
	DRAMBytes    int64   `json:"dram_bytes"`
	SlowBytes    int64   `json:"slow_bytes"`
	SlowFromPool bool    `json:"slow_from_pool"`
	// Devices are the prepared devices, as the kubelet was told them (an idempotent prepare
	// answers the same).
	Devices []DRADevice `json:"devices"`
}

// DRADevice is one allocated device of a prepared claim.
type DRADevice struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

// DRACheckpoint is what the node plugin keeps of the claims prepared on this node.
type DRACheckpoint struct {
	Version int `json:"version"`
	// Ways is the node's way count the runs lie in.
	Ways   int                 `json:"ways"`
	Claims map[string]DRAClaim `json:"claims"` // claim uid -> claim
	// Shift is the lowest way of the node's cbm_mask: a run's way 0 is this bit of the mask.
	Shift int `json:"shift"`
}

// Group is the claim's resctrl group.
func DRAGroup(uid string) string { return DRAGroupPrefix + uid }

// Mask is a run's CAT mask in the node's cbm_mask.
func (c *DRACheckpoint) Mask(r dra.Run) uint64 { return r.Mask() << c.Shift }

var draUID = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// Check holds a checkpoint to its bounds: a known version, a way count of 1..64, every claim
// with a Kubernetes uid, a run within the node not overlapping another's, and memory within
// the contract's bounds.
func (c *DRACheckpoint) Check() error {
	if c.Version != draCheckpointVersion {
		return fmt.Errorf("checkpoint version %d is not %d", c.Version, draCheckpointVersion)
	}
	if c.Ways < 1 || c.Ways > v1alpha1.MaxLLCWays || c.Shift < 0 || c.Shift+c.Ways > v1alpha1.MaxLLCWays {
		return fmt.Errorf("checkpoint: %d ways from way %d do not fit a 64-way mask", c.Ways, c.Shift)
	}
	if len(c.Claims) > c.Ways {
		return fmt.Errorf("checkpoint holds %d claims on %d ways", len(c.Claims), c.Ways)
	}
	var used uint64
	for uid, cl := range c.Claims {
		switch {
		case !draUID.MatchString(uid):
			return fmt.Errorf("checkpoint: claim uid %q is not a Kubernetes uid", clip(uid, 70))
		case cl.Run.Count < 1 || cl.Run.First < 0 || cl.Run.First+cl.Run.Count > c.Ways:
			return fmt.Errorf("checkpoint: claim %s's run (%d ways from %d) is not within %d ways", uid, cl.Run.Count, cl.Run.First, c.Ways)
		case used&cl.Run.Mask() != 0:
			return fmt.Errorf("checkpoint: claim %s's run overlaps another claim's", uid)
		case cl.DRAMBytes < 0 || cl.DRAMBytes >= v1alpha1.MaxBytes || cl.SlowBytes < 0 || cl.SlowBytes >= v1alpha1.MaxBytes:
			return fmt.Errorf("checkpoint: claim %s's bytes are not in 0..2^52", uid)
		case len(cl.Pods) > maxDRAPods || len(cl.Devices) > 16:
			return fmt.Errorf("checkpoint: claim %s has too many pods or devices", uid)
		}
		for _, pod := range cl.Pods {
			if !draUID.MatchString(pod) {
				return fmt.Errorf("checkpoint: claim %s names pod uid %q", uid, clip(pod, 70))
			}
		}
		used |= cl.Run.Mask()
	}
	return nil
}

// ErrNoDRACheckpoint: no claim was ever prepared on this node.
var ErrNoDRACheckpoint = errors.New("no DRA checkpoint on this node")

// ReadDRACheckpoint reads and checks the checkpoint at path (ErrNoDRACheckpoint when absent).
func ReadDRACheckpoint(path string) (*DRACheckpoint, error) {
	data, long, err := readAtMost(path, maxDRACheckpointBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoDRACheckpoint
	} else if err != nil {
		return nil, err
	}
	if long {
		return nil, fmt.Errorf("DRA checkpoint %s is larger than %d bytes", path, maxDRACheckpointBytes)
	}
	var c DRACheckpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("DRA checkpoint %s: %w", path, err)
	}
	if c.Claims == nil {
		c.Claims = map[string]DRAClaim{}
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	return &c, nil
}

// WriteDRACheckpoint checks and writes the checkpoint atomically (a reader sees the old or the
// new file, never part of one).
func WriteDRACheckpoint(path string, c *DRACheckpoint) error {
	if err := c.Check(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return writeAtomic(path, string(data)+"\n")
}

// DRAPlacement is a prepared claim as the placement Adjust applies: the claim's run as the LLC
// mask, its DRAM and slow memory, on this node. Its bytes are the recommendation's (the claim
// template's size, the pair's median request), never its pod's own request, which the node
// cannot see: so the placement says it is sized from the recommendation, and Adjust sets no
// memory limit from it (MemoryLimit), since nothing may limit a container below what its pod
// asked for.
func (c *DRACheckpoint) DRAPlacement(node string, cl DRAClaim) *Placement {
	mask := c.Mask(cl.Run)
	sizedFrom := v1alpha1.SizedFromRecommendation
	return &Placement{
		Schema: v1alpha1.PlacementSchema,
		Node:   node,
		Configuration: v1alpha1.PlacedConfiguration{
			VCPUs: 1, DRAMBytes: cl.DRAMBytes, SlowBytes: cl.SlowBytes, LLCWays: cl.Run.Count,
		},
		LLCMask:      fmt.Sprintf("%#x", mask),
		SlowFromPool: cl.SlowFromPool,
		SizedFrom:    &sizedFrom,
	}
}

// reservedFor is the prepared claim reserved for the pod uid, if any (a checkpoint's runs never
// overlap, and a pod names at most one of tmc's claims; the lowest uid decides otherwise).
func (c *DRACheckpoint) reservedFor(podUID string) (string, bool) {
	found := ""
	for uid, cl := range c.Claims {
		if slices.Contains(cl.Pods, podUID) && (found == "" || uid < found) {
			found = uid
		}
	}
	return found, found != ""
}

// draClaimOf is the claim a container's environment names ("" for none).
func draClaimOf(env []string) string {
	claim := ""
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == DRAClaimEnv {
			claim = v
		}
	}
	return claim
}

// draPlacement is the placement of the prepared claim a container names: the checkpoint's
// claim, for a pod it was reserved for. An error refuses the container: it asked for a claim's
// configuration and must not start without it.
func (p *Plugin) draPlacement(podUID, claim string) (*Placement, string, error) {
	if p.cfg.DRACheckpoint == "" {
		return nil, "", errors.New("this node applies no DRA claims (no --dra-checkpoint)")
	}
	if !draUID.MatchString(claim) {
		return nil, "", fmt.Errorf("%s %q is not a claim uid", DRAClaimEnv, clip(claim, 70))
	}
	c, err := ReadDRACheckpoint(p.cfg.DRACheckpoint)
	if err != nil {
		return nil, "", fmt.Errorf("cannot read the prepared claims: %w", err)
	}
	cl, ok := c.Claims[claim]
	if !ok {
		return nil, "", fmt.Errorf("claim %s is not prepared on this node", claim)
	}
	reserved := false
	for _, uid := range cl.Pods {
		reserved = reserved || uid == podUID
	}
	if !reserved {
		return nil, "", fmt.Errorf("claim %s/%s is not reserved for this pod", cl.Namespace, cl.Name)
	}
	return c.DRAPlacement(p.cfg.NodeName, cl), DRAGroup(claim), nil
}
