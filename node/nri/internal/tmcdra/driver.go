// Package tmcdra is tmc's DRA node plugin for the driver tmc.dev: the kubelet asks it to prepare
// a pod's claims before the pod's containers are created and to unprepare them when the pod is
// gone. Preparing turns a claim's granted count of ways into a run of ways on this node
// (dra.Compact, moving as few held runs as it can), keeps it in a checkpoint with the claim's
// memory, and names the claim to the container through a CDI device. tmc-nri applies the
// claim at container creation with the same rule as a placement (tmcnri.Adjust).
package tmcdra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"tmc.dev/node-nri/internal/tmcnri"
	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

// CDIKind is the CDI kind of a prepared claim's device (vendor tmc.dev, class claim).
const CDIKind = dra.DriverName + "/claim"

// Config is what the node plugin runs with.
type Config struct {
	NodeName string
	// DataDir is the plugin's data directory (the kubelet's plugins/tmc.dev): the checkpoint.
	DataDir string
	// CDIDir is where the per-claim CDI specs go: a directory the runtime reads CDI specs from.
	CDIDir string
	// Resctrl is the node's resctrl (nil or an empty root: none). With L3 CAT, the node's ways
	// are its cbm_mask's, and a moved run's group has its schemata rewritten.
	Resctrl *tmcnri.Resctrl
	// Ways is the node's way count when it has no CAT (what its slice publishes); with CAT it
	// must agree with cbm_mask, or be 0.
	Ways int
}

// Driver implements kubeletplugin.DRAPlugin.
type Driver struct {
	cfg Config
	// OnError is told the helper's background errors (nil: ignored).
	OnError func(err error, msg string)

	mu sync.Mutex // one prepare or unprepare at a time (the helper serialises them too)
}

// New checks the node's ways against its CAT and makes the driver.
func New(cfg Config) (*Driver, error) {
	ways, _, err := nodeWays(cfg)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg}
	// A restarted plugin keeps the runs it held: they must lie in the same ways.
	if c, err := tmcnri.ReadDRACheckpoint(d.checkpointPath()); err == nil && c.Ways != ways {
		return nil, fmt.Errorf("the checkpoint's runs are on %d ways; the node has %d", c.Ways, ways)
	} else if err != nil && !errors.Is(err, tmcnri.ErrNoDRACheckpoint) {
		return nil, err
	}
	return d, nil
}

// nodeWays is the node's way count and the lowest way of its cbm_mask.
func nodeWays(cfg Config) (int, int, error) {
	cat, err := cfg.Resctrl.Info()
	if err != nil {
		if cfg.Ways < 1 || cfg.Ways > v1alpha1.MaxLLCWays {
			return 0, 0, fmt.Errorf("no L3 CAT (%v) and no way count of 1..%d given", err, v1alpha1.MaxLLCWays)
		}
		return cfg.Ways, 0, nil
	}
	ways := bits.OnesCount64(cat.CBM)
	if cfg.Ways != 0 && cfg.Ways != ways {
		return 0, 0, fmt.Errorf("--ways %d disagrees with cbm_mask %#x (%d ways)", cfg.Ways, cat.CBM, ways)
	}
	return ways, bits.TrailingZeros64(cat.CBM), nil
}

func (d *Driver) checkpointPath() string {
	return filepath.Join(d.cfg.DataDir, tmcnri.DRACheckpointName)
}

func (d *Driver) load() (*tmcnri.DRACheckpoint, error) {
	c, err := tmcnri.ReadDRACheckpoint(d.checkpointPath())
	if errors.Is(err, tmcnri.ErrNoDRACheckpoint) {
		ways, shift, err := nodeWays(d.cfg)
		if err != nil {
			return nil, err
		}
		return &tmcnri.DRACheckpoint{Version: 1, Ways: ways, Shift: shift, Claims: map[string]tmcnri.DRAClaim{}}, nil
	}
	return c, err
}

// PrepareResourceClaims prepares each claim: a claim already in the checkpoint answers as it
// did (its groups' schemata made to agree with the checkpoint again); a new one is read,
// compacted into the node's ways and checkpointed before its CDI spec is written. A claim that
// cannot be read or does not fit gets an error: the kubelet does not start its pod.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(claim)
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (d *Driver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	c, err := d.load()
	if err != nil {
		return nil, err
	}
	if held, ok := c.Claims[uid]; ok {
		// The same claim for another of its pods: the pods it is reserved for now may take it.
		if now, err := Read(claim, d.cfg.NodeName); err == nil && !slices.Equal(now.Pods, held.Pods) {
			held.Pods = now.Pods
			c.Claims[uid] = held
			if err := tmcnri.WriteDRACheckpoint(d.checkpointPath(), c); err != nil {
				return nil, fmt.Errorf("cannot checkpoint claim %s: %w", uid, err)
			}
		}
		return d.apply(c, nil, uid, held)
	}
	want, err := Read(claim, d.cfg.NodeName)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	// Compact the held runs, in a fixed order (by uid) so that a retry computes the same.
	uids := make([]string, 0, len(c.Claims))
	for k := range c.Claims {
		uids = append(uids, k)
	}
	sort.Strings(uids)
	held := make([]dra.Run, len(uids))
	for i, k := range uids {
		held[i] = c.Claims[k].Run
	}
	got, err := dra.Compact(c.Ways, held, want.Run.Count)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s's %d ways do not fit this node: %w", claim.Namespace, claim.Name, want.Run.Count, err)
	}
	var moved []string
	for i, k := range uids {
		if got.Held[i] != held[i] {
			cl := c.Claims[k]
			cl.Run = got.Held[i]
			c.Claims[k] = cl
			moved = append(moved, k)
		}
	}
	want.Run = got.New
	c.Claims[uid] = want
	// The checkpoint first: a failure after it is repaired by the kubelet's retry, which
	// rewrites every group from it.
	if err := tmcnri.WriteDRACheckpoint(d.checkpointPath(), c); err != nil {
		return nil, fmt.Errorf("cannot checkpoint claim %s: %w", uid, err)
	}
	return d.apply(c, moved, uid, want)
}

// apply brings the node to the checkpoint after a prepare (the groups' schemata, `moved` only
// when not nil, and the claim's CDI spec) and answers the claim's prepared devices.
func (d *Driver) apply(c *tmcnri.DRACheckpoint, moved []string, uid string, cl tmcnri.DRAClaim) ([]kubeletplugin.Device, error) {
	if err := d.applyRuns(c, moved); err != nil {
		return nil, err
	}
	if err := d.writeCDI(uid); err != nil {
		return nil, err
	}
	return d.devices(uid, cl), nil
}

// applyRuns rewrites the schemata of the claims' groups that exist (only `moved` when it is not
// nil) from the checkpoint, through the same resctrl code as tmc-nri; nothing without CAT.
func (d *Driver) applyRuns(c *tmcnri.DRACheckpoint, moved []string) error {
	cat, err := d.cfg.Resctrl.Info()
	if err != nil {
		return nil // no CAT: the runs are kept, nothing to write
	}
	uids := moved
	if uids == nil {
		for k := range c.Claims {
			uids = append(uids, k)
		}
		sort.Strings(uids)
	}
	for _, k := range uids {
		group := tmcnri.DRAGroup(k)
		if _, err := os.Stat(filepath.Join(d.cfg.Resctrl.Root, group)); err != nil {
			continue // no container yet: tmc-nri makes the group from the checkpoint
		}
		schemata, err := cat.Schemata(c.Mask(c.Claims[k].Run))
		if err != nil {
			return fmt.Errorf("claim %s: %w", k, err)
		}
		if err := d.cfg.Resctrl.EnsureGroup(group, schemata); err != nil {
			return err
		}
	}
	return nil
}

// devices are the prepared devices the kubelet is told, each with the claim's CDI device.
func (d *Driver) devices(uid string, cl tmcnri.DRAClaim) []kubeletplugin.Device {
	id := CDIKind + "=" + uid
	out := make([]kubeletplugin.Device, 0, len(cl.Devices))
	for _, dev := range cl.Devices {
		out = append(out, kubeletplugin.Device{
			Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: []string{id},
		})
	}
	return out
}

// cdiSpec is the claim's CDI spec: one device, named by the claim's uid (never reused), whose
// edit names the claim in the container's environment.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name  string   `json:"name"`
	Edits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env []string `json:"env"`
}

func (d *Driver) cdiPath(uid string) string {
	return filepath.Join(d.cfg.CDIDir, "tmc.dev-claim_"+uid+".json")
}

func (d *Driver) writeCDI(uid string) error {
	data, err := json.MarshalIndent(cdiSpec{Version: "0.6.0", Kind: CDIKind, Devices: []cdiDevice{{
		Name: uid, Edits: cdiEdits{Env: []string{tmcnri.DRAClaimEnv + "=" + uid}},
	}}}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.cfg.CDIDir, 0o755); err != nil {
		return err
	}
	path := d.cdiPath(uid)
	tmp := path + ".tmp" // not .json: the runtime's CDI cache ignores it until the rename
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// UnprepareResourceClaims releases each claim: its run leaves the checkpoint, its CDI spec and
// its resctrl group go. A claim not prepared here is already released.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		out[claim.UID] = d.unprepare(string(claim.UID))
	}
	return out, nil
}

func (d *Driver) unprepare(uid string) error {
	c, err := d.load()
	if err != nil {
		return err
	}
	if _, ok := c.Claims[uid]; ok {
		delete(c.Claims, uid)
		if err := tmcnri.WriteDRACheckpoint(d.checkpointPath(), c); err != nil {
			return err
		}
	}
	if err := os.Remove(d.cdiPath(uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return d.cfg.Resctrl.RemoveGroup(tmcnri.DRAGroup(uid))
}

// HandleError is told the helper's background errors.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	if d.OnError != nil {
		d.OnError(err, msg)
	}
}

// Read is what a claim allocated on node asks of it, from its allocation's results of the
// driver tmc.dev: the ways count (as Run.Count), the DRAM and slow bytes consumed, and the pods
// it is reserved for. Every number is bounded: a count of 1..64 whole ways, bytes of whole MiB
// below 2^52; anything else, an unknown device or a pool that is neither the node's nor a rack
// pool's, is an error.
func Read(claim *resourceapi.ResourceClaim, node string) (tmcnri.DRAClaim, error) {
	out := tmcnri.DRAClaim{Namespace: claim.Namespace, Name: claim.Name}
	if claim.Status.Allocation == nil {
		return out, errors.New("not allocated")
	}
	if len(claim.Status.ReservedFor) > 256 {
		return out, fmt.Errorf("reserved for %d consumers", len(claim.Status.ReservedFor))
	}
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			out.Pods = append(out.Pods, string(r.UID))
		}
	}
	ways := 0
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != dra.DriverName {
			continue
		}
		if len(out.Devices) >= 16 {
			return out, errors.New("more than 16 devices of tmc.dev")
		}
		out.Devices = append(out.Devices, tmcnri.DRADevice{Request: r.Request, Pool: r.Pool, Device: r.Device})
		pool := r.Pool == node
		rack := len(r.Pool) > len(dra.RackPoolPrefix) && strings.HasPrefix(r.Pool, dra.RackPoolPrefix)
		if !pool && !rack {
			return out, fmt.Errorf("device %s/%s is in neither this node's pool nor a rack pool", clip(r.Pool), clip(r.Device))
		}
		switch {
		case pool && r.Device == dra.DeviceWays:
			n, err := whole(r.ConsumedCapacity, dra.CapacityWays, 1, int64(v1alpha1.MaxLLCWays), 1)
			if err != nil {
				return out, fmt.Errorf("device %s: %w", r.Device, err)
			}
			if ways != 0 {
				return out, errors.New("more than one ways device")
			}
			ways = int(n)
		case pool && (r.Device == dra.DeviceDRAM || r.Device == dra.DeviceSlow), rack:
			b, err := whole(r.ConsumedCapacity, dra.CapacityBytes, dra.MiB, v1alpha1.MaxBytes-1, dra.MiB)
			if err != nil {
				return out, fmt.Errorf("device %s/%s: %w", clip(r.Pool), clip(r.Device), err)
			}
			switch {
			case rack:
				out.SlowBytes += b
				out.SlowFromPool = true
			case r.Device == dra.DeviceDRAM:
				out.DRAMBytes += b
			default:
				out.SlowBytes += b
			}
			if out.DRAMBytes >= v1alpha1.MaxBytes || out.SlowBytes >= v1alpha1.MaxBytes {
				return out, errors.New("bytes beyond 2^52")
			}
		default:
			return out, fmt.Errorf("device %s/%s is not one of tmc.dev's", clip(r.Pool), clip(r.Device))
		}
	}
	if ways == 0 {
		return out, errors.New("no ways allocated on this node")
	}
	out.Run = dra.Run{Count: ways}
	slices.Sort(out.Pods)
	return out, nil
}

// whole is capacity name's consumed quantity: an integer in lo..hi, a multiple of unit.
func whole(consumed map[resourceapi.QualifiedName]resource.Quantity, name resourceapi.QualifiedName, lo, hi, unit int64) (int64, error) {
	q, ok := consumed[name]
	if !ok {
		return 0, fmt.Errorf("no consumed capacity %q", name)
	}
	v, exact := q.AsInt64()
	if !exact || v < lo || v > hi || v%unit != 0 {
		return 0, fmt.Errorf("consumed %s %s is not a whole multiple of %d in %d..%d", name, clip(q.String()), unit, lo, hi)
	}
	return v, nil
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}
