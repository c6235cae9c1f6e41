// Package tmcnri is tmc's node plugin for the container runtime's Node Resource Interface: it
// applies the configuration tmc's scheduler placed a pod in to each of the pod's containers at
// creation, before the container's first instruction, and refuses on the node what the node
// cannot hold.
package tmcnri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Where a placed container finds what the plugin gives it: its plan file (TMC_PLAN) and the
// allocator shim (LD_PRELOAD), both mounted read-only.
const (
	ContainerPlanPath = "/run/tmc/plan"
	ContainerShimPath = "/run/tmc/libtmcalloc.so"
	shimName          = "libtmcalloc.so"
	// RecordDir, under the plan directory, holds one record per container: what was applied at
	// its creation and whether it started. The node agent reports a verification run only for a
	// pod whose every container has a complete, started record.
	RecordDir = "applied"
)

// Config is what the plugin runs with.
type Config struct {
	NodeName string
	SysRoot  string   // the host's /sys (NUMA topology)
	Resctrl  *Resctrl // nil or an empty root: no resctrl
	// PlanDir is the host directory plans and records are written to; the plugin runs with it
	// mounted at the same path, so a path it writes is the path a container's mount names.
	PlanDir string
	// ShimDir is the host directory the agent installs the allocator shim into ("" for none).
	ShimDir string
	// Tenants, when it selects, are the namespaces whose placements the plugin applies: the
	// admission policy checks who writes a placement there only. Namespaces tells their labels.
	Tenants    *v1alpha1.TenantNamespaces
	Namespaces Namespaces
	// Seals, when set, are the keys tmc's scheduler seals placements with: a placement is applied
	// only when its seal verifies (nil: sealing off, every readable placement is tmc's).
	Seals *v1alpha1.SealKeys
	// DRACheckpoint is the DRA node plugin's checkpoint of the claims it prepared (tmc-dra-node's
	// data directory); "" when the node applies no DRA claims.
	DRACheckpoint string
	// Plans are the published recommendations, where a placement of schema tmc.placement/v3
	// has its plan read; nil when the node has no API server to read them from.
	Plans PublishedPlans
}

// Namespaces tells a namespace's labels (an informer's store): ok false for one it does not
// hold; Synced false until it has listed them.
type Namespaces interface {
	Labels(namespace string) (labels map[string]string, ok bool)
	Synced() bool
}

// Reporter tells the pod's owner what the node did not apply or refused (an Event on the pod).
type Reporter interface {
	Event(pod *api.PodSandbox, warning bool, reason, message string)
}

// Counter counts outcomes for the plugin's metrics.
type Counter interface {
	Container(outcome string)
	Unapplied(what string)
	// Handled is how long the plugin took over one CreateContainer (what it adds to creation).
	Handled(seconds float64)
}

// Outcomes of a container's creation, as counted.
const (
	OutcomeAdjusted  = "adjusted"  // everything the placement asks for is in the spec
	OutcomePartial   = "partial"   // adjusted, but something could not be applied (reported)
	OutcomeRefused   = "refused"   // creation failed: the node cannot hold it, or a verification run
	OutcomeMalformed = "malformed" // unreadable placement: created unadjusted (reported)
	OutcomeLate      = "late"      // created while the plugin was not connected (reported)
	OutcomeForeign   = "foreign"   // placed outside tmc's tenant namespaces, or unlabelled: created unadjusted (reported)
	OutcomeUnsealed  = "unsealed"  // a placement tmc's scheduler did not seal: created unadjusted (reported)
)

// Record is what the plugin applied to one container, as the node agent reads it.
type Record struct {
	Namespace        string   `json:"namespace"`
	Pod              string   `json:"pod"`
	UID              string   `json:"uid"`
	Container        string   `json:"container"`
	LLCMask          string   `json:"llc_mask"`
	DRAMBytes        int64    `json:"dram_bytes"`
	SlowBytes        int64    `json:"slow_bytes"`
	RecommendationID *string  `json:"recommendation_id"`
	Applied          []string `json:"applied"`
	Skipped          []string `json:"skipped"`
	// Complete: everything the placement asks for was in the adjustment the plugin returned.
	Complete bool `json:"complete"`
	// Confirmed: the runtime created the container with that adjustment (its PostCreateContainer
	// showed the plan in the container's environment). A runtime that gave up waiting for the
	// plugin creates the container without it, and never confirms.
	Confirmed bool   `json:"confirmed"`
	Started   bool   `json:"started"`
	Created   string `json:"created"`
	// MemoryLimit is the container's memory limit at creation (the placement's, or the
	// container's own; 0 for none): an update may lower it, never raise it (UpdateContainer).
	MemoryLimit int64 `json:"memory_limit"`
}

type admitted struct {
	key  string
	mask uint64
	dram int64
	slow int64
	pool bool
}

// Plugin is the NRI plugin; its methods are the NRI events it subscribes to.
type Plugin struct {
	cfg    Config
	report Reporter
	count  Counter
	now    func() time.Time
	// adjust is Adjust; a test wraps it to see that every path computes its adjustment there.
	adjust func(*Placement, NodeLayout, Target) Adjustment

	// syncs counts the runtime's synchronisations: a request that was answered across one came
	// over a connection the runtime had dropped (it had stopped waiting and created the
	// container without the answer), so it is neither recorded nor held.
	syncs atomic.Int64

	mu   sync.Mutex
	pods map[string]admitted // pod uid -> what it holds on this node
	// waiting: pod uid -> when a container of the pod was first refused because the node has
	// not seen the published plan its placement names (PlanWait bounds it).
	waiting map[string]time.Time
}

// New makes the plugin.
func New(cfg Config, report Reporter, count Counter) *Plugin {
	return &Plugin{cfg: cfg, report: report, count: count, now: time.Now, adjust: Adjust, pods: map[string]admitted{}, waiting: map[string]time.Time{}}
}

var (
	uidText  = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	nameText = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

func podKey(pod *api.PodSandbox) string { return pod.GetNamespace() + "/" + pod.GetName() }

// RefusedError is returned to the runtime, which fails the container's creation with it.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return "tmc: " + e.Msg }

// CreateContainer adjusts a placed pod's container; a container of a pod tmc did not place gets
// no adjustment at all. Three steps: the node admits the container (or refuses it), Adjust
// computes what its placement makes of it, and the adjustment is applied and recorded.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := p.now()
	defer func() { p.count.Handled(p.now().Sub(start).Seconds()) }()
	syncs := p.syncs.Load()
	in, err := p.admitContainer(pod, ctr)
	if in == nil {
		return nil, nil, err // not adjusted: not placed, not a tenant's, malformed, or refused
	}
	t := targetOf(pod, ctr)
	t.Group = in.group
	want := p.adjust(in.placement, in.node, t)
	adj, rec := p.applyAtCreation(pod, ctr, in.placement, want)
	if in.planUnavailable != "" {
		rec.Skipped = append(rec.Skipped, "plan: "+in.planUnavailable)
		rec.Complete = false
		p.count.Unapplied("plan")
	}
	return p.record(ctx, syncs, pod, ctr, in, adj, rec)
}

// admission is a container the node admitted, with what its adjustment is computed from.
type admission struct {
	placement    *Placement
	node         NodeLayout
	verification bool // a verification run: it starts fully adjusted or not at all
	fresh        bool // this container's admission admitted its pod
	// planUnavailable says why the published plan the placement names is not applied.
	planUnavailable string
	// group is the DRA claim's resctrl group, for a container that names a prepared claim.
	group string
}

// admitContainer is the node's decision on a container: nil when it gets no adjustment (with
// the error that refuses its creation, if any; counted and reported here).
func (p *Plugin) admitContainer(pod *api.PodSandbox, ctr *api.Container) (*admission, error) {
	ann := pod.GetAnnotations()
	verification := ann[VerificationRunAnnotation] == "true"
	if claim := draClaimOf(ctr.GetEnv()); claim != "" {
		return p.admitDRA(pod, ctr, claim, verification)
	}
	pl, err := ParsePlacement(ann)
	if pl == nil && err == nil {
		return nil, nil // not placed by tmc: no adjustment at all
	}
	if !v1alpha1.IsTieredPod(pod.GetLabels()) {
		// As outside the tenant namespaces: no admission policy looked at who wrote this
		// placement (the pod's own labels say so, whatever its namespace).
		p.count.Container(OutcomeForeign)
		p.report.Event(pod, true, "TmcPlacementIgnored", fmt.Sprintf(
			"container %s created without tmc's configuration: %s", ctr.GetName(), untiered))
		return nil, nil
	}
	switch p.tenant(pod.GetNamespace()) {
	case tenantUnknown:
		// Which namespaces are tmc's is not known yet: nothing is applied on a guess, and the
		// kubelet creates the container again.
		return nil, p.refuse(pod, "TmcPlacementRefused",
			"the node does not know tmc's tenant namespaces yet (listing them); the container is created again")
	case tenantNot:
		// No admission policy looked at who wrote this placement: it is not applied, and not
		// held against the placements that were checked.
		p.count.Container(OutcomeForeign)
		p.report.Event(pod, true, "TmcPlacementIgnored", fmt.Sprintf(
			"container %s created without tmc's configuration: namespace %s is not one of tmc's tenant namespaces (labelled %s)",
			ctr.GetName(), pod.GetNamespace(), p.cfg.Tenants.String()))
		return nil, nil
	}
	if err == nil {
		err = containerIdentity(pod, ctr)
	}
	if err != nil {
		if verification {
			return nil, p.refuse(pod, "TmcVerificationNotApplied",
				"a verification run whose configuration cannot be applied does not start: "+err.Error())
		}
		p.count.Container(OutcomeMalformed)
		p.report.Event(pod, true, "TmcPlacementMalformed",
			fmt.Sprintf("container %s created without tmc's configuration: %v", ctr.GetName(), err))
		return nil, nil
	}
	if err := p.cfg.Seals.Verify(pod.GetUid(), ann); err != nil {
		var seal *v1alpha1.SealError
		if errors.As(err, &seal) && seal.KeyNotHeld {
			// A key rotated in reaches this node's Secret volume after the scheduler seals with
			// it: refused, the kubelet creates the container again, and the key is read then.
			return nil, p.refuse(pod, "TmcPlacementRefused", err.Error()+"; the container is created again")
		}
		// Written by someone other than tmc's scheduler (a Binding that no admission policy
		// judged): it gives the pod nothing, and is not held against the placements that are
		// tmc's.
		if verification {
			return nil, p.refuse(pod, "TmcVerificationNotApplied",
				"a verification run whose placement is not tmc's does not start: "+err.Error())
		}
		p.count.Container(OutcomeUnsealed)
		p.report.Event(pod, true, "TmcPlacementUnsealed",
			fmt.Sprintf("container %s created without tmc's configuration: %v", ctr.GetName(), err))
		return nil, nil
	}
	if pl.Node != p.cfg.NodeName {
		return nil, p.refuse(pod, "TmcPlacementRefused",
			fmt.Sprintf("placed on node %q, this is %q", clip(pl.Node, 60), p.cfg.NodeName))
	}
	resolved, planUnavailable := p.resolvePlan(pod.GetUid(), pl)
	if resolved == nil {
		return nil, p.refuse(pod, "TmcPlacementRefused", planUnavailable+"; the container is created again")
	}
	in, err := p.admitOnNode(pod, ctr, resolved, false, "TmcPlacementRefused")
	if err != nil {
		return nil, err
	}
	in.verification, in.planUnavailable = verification, planUnavailable
	return in, nil
}

// containerIdentity checks the pod's uid and the container's name, which name files and
// resctrl groups on the node.
func containerIdentity(pod *api.PodSandbox, ctr *api.Container) error {
	if !uidText.MatchString(pod.GetUid()) {
		return malformed("pod uid %q is not a Kubernetes uid", clip(pod.GetUid(), 70))
	}
	if !nameText.MatchString(ctr.GetName()) {
		return malformed("container name %q is not a DNS label", clip(ctr.GetName(), 70))
	}
	return nil
}

// admitOnNode reads the node's layout and admits the pod's placement against what the node's
// placed pods hold (`admit`); a refusal is reported with reason.
func (p *Plugin) admitOnNode(pod *api.PodSandbox, ctr *api.Container, pl *Placement, claimed bool, reason string) (*admission, error) {
	node, err := ReadNodeLayout(p.cfg.SysRoot, p.cfg.Resctrl)
	if err != nil {
		return nil, p.refuse(pod, reason, node.NoTopology)
	}
	_, slowNode := node.Topology.Nearest(targetOf(pod, ctr).CPUs)
	fresh, why := p.admit(pod, pl, node.Topology, slowNode, claimed)
	if why != "" {
		return nil, p.refuse(pod, reason, why)
	}
	return &admission{placement: pl, node: node, fresh: fresh}, nil
}

// admitDRA is the node's decision on a container that names a prepared DRA claim (DRAClaimEnv,
// which the claim's CDI device sets): the claim's configuration, from the node plugin's
// checkpoint, for a pod it is reserved for. Such a container never starts without it: the
// kubelet creates it again.
func (p *Plugin) admitDRA(pod *api.PodSandbox, ctr *api.Container, claim string, verification bool) (*admission, error) {
	if err := containerIdentity(pod, ctr); err != nil {
		return nil, p.refuse(pod, "TmcClaimRefused", err.Error())
	}
	pl, group, err := p.draPlacement(pod.GetUid(), claim)
	if err != nil {
		return nil, p.refuse(pod, "TmcClaimRefused", err.Error()+"; the container is created again")
	}
	// The claim's ways are the node plugin's to place (its checkpoint keeps the runs apart, and
	// compaction moves them): only the memory is checked here.
	in, err := p.admitOnNode(pod, ctr, pl, true, "TmcClaimRefused")
	if err != nil {
		return nil, err
	}
	in.verification, in.group = verification, group
	return in, nil
}

// resolvePlan is the pod's plan (ResolvePodPlan, kept in the plan directory after the first
// answer): nil while the node has not seen what the placement names, for at most PlanWait from
// the first container refused for it.
func (p *Plugin) resolvePlan(uid string, pl *Placement) (*Placement, string) {
	now := p.now()
	p.mu.Lock()
	since, ok := p.waiting[uid]
	p.mu.Unlock()
	if !ok {
		since = now
	}
	resolved, why := ResolvePodPlan(p.cfg.PlanDir, uid, pl, p.cfg.Plans, now.Sub(since) >= PlanWait)
	p.mu.Lock()
	defer p.mu.Unlock()
	if resolved == nil {
		p.waiting[uid] = since
	} else {
		delete(p.waiting, uid)
	}
	return resolved, why
}

// targetOf is the container an adjustment at creation or synchronisation is for.
func targetOf(pod *api.PodSandbox, ctr *api.Container) Target {
	cpus, err := ParseList(ctr.GetLinux().GetResources().GetCpu().GetCpus())
	if err != nil {
		cpus = nil // the container's own cpuset is the runtime's; all CPUs are a safe superset
	}
	return Target{Pod: podKey(pod), UID: pod.GetUid(), CPUs: cpus,
		OwnLimit: ctr.GetLinux().GetResources().GetMemory().GetLimit().GetValue()}
}

// applyAtCreation puts an adjustment in the container's spec: the runtime creates it in the
// pod's resctrl group (made here with its schemata, for runtimes that only join a group), on its
// memory nodes, under its memory limit, with its plan and the allocator shim mounted.
func (p *Plugin) applyAtCreation(pod *api.PodSandbox, ctr *api.Container, pl *Placement, want Adjustment) (*api.ContainerAdjustment, Record) {
	adj := &api.ContainerAdjustment{}
	rec := Record{
		Namespace: pod.GetNamespace(), Pod: pod.GetName(), UID: pod.GetUid(), Container: ctr.GetName(),
		LLCMask: pl.LLCMask, DRAMBytes: pl.Configuration.DRAMBytes, SlowBytes: pl.Configuration.SlowBytes,
		RecommendationID: pl.RecommendationID, Created: p.now().UTC().Format(time.RFC3339Nano),
	}
	skip := func(what, why string) {
		rec.Skipped = append(rec.Skipped, what+": "+why)
		p.count.Unapplied(what)
	}

	if want.Schemata == "" {
		skip("llc-mask", want.LLCUnapplied)
	} else if err := p.cfg.Resctrl.EnsureGroup(want.Group, want.Schemata); err != nil {
		skip("llc-mask", err.Error())
	} else {
		adj.SetLinuxRDTClosID(want.Group)
		adj.SetLinuxRDTSchemata([]string{want.Schemata})
		rec.Applied = append(rec.Applied, "intelRdt "+want.Group+" "+want.Schemata)
	}

	if len(want.Mems) == 0 {
		skip("cpuset.mems", want.MemsUnapplied)
	} else {
		adj.SetLinuxCPUSetMems(FormatList(want.Mems))
		rec.Applied = append(rec.Applied, "cpuset.mems "+FormatList(want.Mems))
	}

	// The record holds the limit the container was created with, which an update may not raise.
	rec.MemoryLimit = max(targetOf(pod, ctr).OwnLimit, 0)
	if want.MemoryLimit > 0 {
		adj.SetLinuxMemoryLimit(want.MemoryLimit)
		rec.Applied = append(rec.Applied, fmt.Sprintf("memory.limit %d", want.MemoryLimit))
		rec.MemoryLimit = want.MemoryLimit
	}

	if want.Plan == "" {
		skip("plan", want.PlanUnapplied)
	} else if err := writeAtomic(filepath.Join(p.cfg.PlanDir, want.PlanFile), want.Plan); err != nil {
		skip("plan", err.Error())
	} else {
		adj.AddMount(&api.Mount{Destination: ContainerPlanPath, Source: filepath.Join(p.cfg.PlanDir, want.PlanFile), Type: "bind",
			Options: []string{"bind", "ro", "rprivate"}})
		adj.AddEnv("TMC_PLAN", ContainerPlanPath)
		rec.Applied = append(rec.Applied, "plan "+ContainerPlanPath)
	}
	p.preload(ctr, adj, &rec, skip)
	rec.Complete = len(rec.Skipped) == 0
	return adj, rec
}

// record hands the adjustment to the runtime and writes the container's record, unless the
// container may not start with it: a verification run not fully adjusted, or a runtime that
// stopped waiting. syncs is the count of synchronisations when the request arrived.
func (p *Plugin) record(ctx context.Context, syncs int64, pod *api.PodSandbox, ctr *api.Container, in *admission, adj *api.ContainerAdjustment, rec Record) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if in.verification && !rec.Complete {
		if in.fresh {
			p.release(pod.GetUid())
		}
		return nil, nil, p.refuse(pod, "TmcVerificationNotApplied",
			"a verification run whose configuration cannot be applied does not start: "+strings.Join(rec.Skipped, "; "))
	}
	if p.syncs.Load() != syncs {
		// The runtime synchronised while this request was answered: it came over a connection
		// the runtime had dropped (a plugin paused past the request timeout and resumed; the
		// request's deadline runs from when it is read, so ctx does not show it). The container
		// was created without this answer, and Synchronize has rebuilt what the pod holds:
		// nothing is recorded, nothing released.
		return nil, nil, errors.New("tmc: the runtime synchronised while this request was answered: it created the container without the answer")
	}
	if ctx.Err() != nil {
		// The runtime stopped waiting (its NRI request timeout): it creates the container without
		// this adjustment, so neither record nor report it as adjusted; the plugin finds it when
		// the runtime next synchronises.
		if in.fresh {
			p.release(pod.GetUid())
		}
		return nil, nil, ctx.Err()
	}
	if err := p.writeRecord(&rec); err != nil {
		// Without a record the agent will not report this pod's run: say so, but run it.
		rec.Skipped = append(rec.Skipped, "record: "+err.Error())
		p.count.Unapplied("record")
	}
	if len(rec.Skipped) == 0 {
		p.count.Container(OutcomeAdjusted)
	} else {
		p.count.Container(OutcomePartial)
		p.report.Event(pod, true, "TmcNotApplied", fmt.Sprintf("container %s: applied %s; not applied: %s",
			ctr.GetName(), strings.Join(rec.Applied, ", "), strings.Join(rec.Skipped, "; ")))
	}
	return adj, nil, nil
}

// preload puts the allocator shim in the container: tmc's own copy, always mounted at
// ContainerShimPath, first in LD_PRELOAD. A manifest's own LD_PRELOAD is kept after it, less any
// entry named like the shim (manifests written before the plugin preloaded it from a path of
// their own; loaded twice it would interpose twice): a path merely named like the shim is never
// taken for it, and a manifest that mounts its own file where
// tmc's shim goes is reported, not trusted: verification counts a run only where tmc's shim ran.
func (p *Plugin) preload(ctr *api.Container, adj *api.ContainerAdjustment, rec *Record, skip func(string, string)) {
	existing := ""
	for _, kv := range ctr.GetEnv() {
		if k, v, _ := strings.Cut(kv, "="); k == "LD_PRELOAD" {
			existing = v
		}
	}
	for _, m := range ctr.GetMounts() {
		if d := filepath.Clean(m.GetDestination()); d == ContainerShimPath || d == filepath.Dir(ContainerShimPath) {
			skip("shim", "the manifest mounts its own "+d+", where tmc's shim goes")
			return
		}
	}
	if p.cfg.ShimDir == "" {
		skip("shim", "no shim directory configured on this node")
		return
	}
	host := filepath.Join(p.cfg.ShimDir, shimName)
	if st, err := os.Stat(host); err != nil || !st.Mode().IsRegular() {
		skip("shim", host+" is not installed (the agent builds it)")
		return
	}
	adj.AddMount(&api.Mount{Destination: ContainerShimPath, Source: host, Type: "bind",
		Options: []string{"bind", "ro", "rprivate"}})
	value := ContainerShimPath
	for _, entry := range strings.FieldsFunc(existing, func(r rune) bool { return r == ' ' || r == ':' }) {
		if filepath.Base(entry) != shimName { // tmc's own copy stands for any path named so
			value += " " + entry
		}
	}
	adj.AddEnv("LD_PRELOAD", value)
	rec.Applied = append(rec.Applied, "shim "+ContainerShimPath)
}

// admit is the node's own check: a pod's ways may not overlap another running placed pod's, and
// the placed pods' DRAM and slow memory together must fit the node. A pod already admitted (its
// next container, or a restart) is not checked again. fresh: this call admitted it; why: the
// reason it is refused ("" admits).
//
// claimed: the ways are a DRA claim's, placed by the node plugin; they are neither checked nor
// held against other pods' masks here.
func (p *Plugin) admit(pod *api.PodSandbox, pl *Placement, topo *Topology, slowNode int, claimed bool) (fresh bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid := pod.GetUid()
	if _, ok := p.pods[uid]; ok {
		return false, ""
	}
	c := pl.Configuration
	if c.SlowBytes > 0 && slowNode < 0 {
		return false, fmt.Sprintf("the placement gives %d bytes of slow memory and this node has no slow NUMA node", c.SlowBytes)
	}
	mask := pl.LLCMaskBits()
	if claimed {
		mask = 0
	}
	nodeDRAM, nodeSlow := topo.Capacity()
	dram, slow := c.DRAMBytes, c.SlowBytes
	for other, a := range p.pods {
		if other == uid {
			continue
		}
		if a.mask&mask != 0 {
			return false, fmt.Sprintf("LLC mask %s overlaps %s's %#x on this node", pl.LLCMask, a.key, a.mask)
		}
		dram += a.dram
		if !a.pool {
			slow += a.slow
		}
	}
	if dram > nodeDRAM {
		return false, fmt.Sprintf("placed pods would hold %d bytes of DRAM; the node has %d", dram, nodeDRAM)
	}
	if !pl.SlowFromPool && slow > nodeSlow {
		return false, fmt.Sprintf("placed pods would hold %d bytes of slow memory; the node has %d", slow, nodeSlow)
	}
	p.pods[uid] = admitted{key: podKey(pod), mask: mask, dram: c.DRAMBytes, slow: c.SlowBytes, pool: pl.SlowFromPool}
	return true, ""
}

// release forgets a pod whose first container's creation was refused after it was admitted.
func (p *Plugin) release(uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, uid)
}

func (p *Plugin) refuse(pod *api.PodSandbox, reason, msg string) error {
	p.count.Container(OutcomeRefused)
	p.count.Unapplied("refused")
	p.report.Event(pod, true, reason, msg)
	return &RefusedError{Msg: msg}
}

func (p *Plugin) readRecord(uid, container string) (*Record, bool) {
	path, ok := p.recordPath(uid, container)
	if !ok {
		return nil, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false // not a container the plugin adjusted
	}
	var rec Record
	if json.Unmarshal(data, &rec) != nil {
		return nil, false
	}
	return &rec, true
}

// PostCreateContainer confirms the record: the runtime created the container, and its
// environment shows the plan the plugin gave it.
func (p *Plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	rec, ok := p.readRecord(pod.GetUid(), ctr.GetName())
	if !ok {
		return nil
	}
	planned := slices.Contains(rec.Applied, "plan "+ContainerPlanPath)
	rec.Confirmed = !planned || slices.Contains(ctr.GetEnv(), "TMC_PLAN="+ContainerPlanPath)
	return p.writeRecord(rec)
}

// PostStartContainer marks a confirmed record as started: the runtime started the container's
// process in the spec the record describes.
func (p *Plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	rec, ok := p.readRecord(pod.GetUid(), ctr.GetName())
	if !ok || !rec.Confirmed {
		return nil
	}
	rec.Started = true
	return p.writeRecord(rec)
}

// UpdateContainer is the node's check after creation: a placed container's memory limit may be
// lowered, never raised past (or lifted from) the limit it was created with, since the node
// admitted the pod for the memory its placement holds; a runtime's own update (crictl update)
// and the kubelet's resize of a running pod both come here. Other resources pass unchanged.
func (p *Plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	rec, ok := p.readRecord(pod.GetUid(), ctr.GetName())
	if !ok || rec.MemoryLimit <= 0 {
		return nil, nil // not adjusted by tmc, or created with no limit to hold
	}
	asked := res.GetMemory().GetLimit()
	if asked == nil {
		return nil, nil // the update leaves the memory limit as it is
	}
	if v := asked.GetValue(); v > 0 && v <= rec.MemoryLimit {
		return nil, nil
	}
	what := "lift the memory limit"
	if v := asked.GetValue(); v > 0 {
		what = fmt.Sprintf("raise the memory limit to %d bytes", v)
	}
	msg := fmt.Sprintf("container %s may not %s: it was placed with %d bytes (recreate the pod with a larger request to be placed again)",
		ctr.GetName(), what, rec.MemoryLimit)
	p.count.Unapplied("update")
	p.report.Event(pod, true, "TmcUpdateRefused", msg)
	return nil, &RefusedError{Msg: msg}
}

// StopPodSandbox frees what the pod held on this node: its containers are gone.
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.mu.Lock()
	delete(p.pods, pod.GetUid())
	delete(p.waiting, pod.GetUid())
	p.mu.Unlock()
	return nil
}

// RemovePodSandbox removes what the plugin made for the pod: its plan, the plan it resolved its
// placement to (KeptPlanSuffix), its records and its resctrl group.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	_ = p.StopPodSandbox(ctx, pod)
	uid := pod.GetUid()
	if !uidText.MatchString(uid) {
		return nil
	}
	var errs []error
	for _, name := range []string{uid + ".plan", uid + KeptPlanSuffix} {
		if err := os.Remove(filepath.Join(p.cfg.PlanDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(p.cfg.PlanDir, RecordDir, uid)); err != nil {
		errs = append(errs, err)
	}
	if err := p.cfg.Resctrl.RemoveGroup(GroupPrefix + uid); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Synchronize rebuilds what running placed pods hold (after the plugin or the runtime restarts),
// and reports the containers created while the plugin was not connected: the runtime created
// them without it, so their environment, mounts and resctrl group are not what tmc placed them
// in. Their memory limit and memory nodes are corrected in place; the rest is reported, and
// with no record, their runs are never reported as verification runs.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := map[string]*api.PodSandbox{}
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	var updates []*api.ContainerUpdate
	// Unreadable topology: the memory limit is still corrected (the adjustment says why the
	// memory nodes are not).
	node, _ := ReadNodeLayout(p.cfg.SysRoot, p.cfg.Resctrl)
	p.syncs.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods = map[string]admitted{}
	for _, ctr := range ctrs {
		pod := byID[ctr.GetPodSandboxId()]
		if pod == nil || ctr.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		pl, group, claimed := p.heldBy(pod, ctr)
		if pl == nil {
			continue
		}
		c := pl.Configuration
		mask := pl.LLCMaskBits()
		if claimed {
			mask = 0 // the claim's ways are the node plugin's to keep apart (as admit holds them)
		}
		p.pods[pod.GetUid()] = admitted{key: podKey(pod), mask: mask, dram: c.DRAMBytes, slow: c.SlowBytes, pool: pl.SlowFromPool}
		if rec, ok := p.readRecord(pod.GetUid(), ctr.GetName()); ok {
			if rec.Confirmed {
				continue // adjusted at its creation
			}
			// The plugin answered, but the runtime had stopped waiting: created without it.
			if path, ok := p.recordPath(pod.GetUid(), ctr.GetName()); ok {
				_ = os.Remove(path)
				_ = os.Remove(filepath.Dir(path)) // the pod's records, if this was the last
			}
		}
		p.count.Container(OutcomeLate)
		p.count.Unapplied("late")
		u := &api.ContainerUpdate{ContainerId: ctr.GetId()}
		u.SetIgnoreFailure()
		fixed := []string{}
		t := targetOf(pod, ctr)
		t.Group = group
		want := p.adjust(pl, node, t)
		if want.MemoryLimit > 0 {
			u.SetLinuxMemoryLimit(want.MemoryLimit)
			fixed = append(fixed, fmt.Sprintf("memory limit %d", want.MemoryLimit))
		}
		if len(want.Mems) > 0 {
			u.SetLinuxCPUSetMems(FormatList(want.Mems))
			fixed = append(fixed, "cpuset.mems "+FormatList(want.Mems))
		}
		updates = append(updates, u)
		p.report.Event(pod, true, "TmcNotApplied", fmt.Sprintf(
			"container %s was created while tmc's node plugin was not running: corrected %s; its plan, shim and LLC ways were not applied (recreate the pod to apply them)",
			ctr.GetName(), strings.Join(fixed, ", ")))
	}
	return updates, nil
}

// heldBy is what a running container holds on this node, as Synchronize rebuilds it: the
// prepared claim its environment names (with the claim's resctrl group; claimed), else its pod's
// placement; nil for a container tmc configured nothing of. A placement of a pod without the
// tiered pod label, or of a namespace known not to be a tenant's, was never applied and holds
// nothing; while the namespaces are not known yet,
// a placed pod holds its room (never over-commit). A container naming a claim the checkpoint no
// longer has (or that cannot be read) is reported: what it holds is not known.
func (p *Plugin) heldBy(pod *api.PodSandbox, ctr *api.Container) (pl *Placement, group string, claimed bool) {
	if !uidText.MatchString(pod.GetUid()) {
		return nil, "", false
	}
	if claim := draClaimOf(ctr.GetEnv()); claim != "" {
		pl, group, err := p.draPlacement(pod.GetUid(), claim)
		if err != nil {
			p.report.Event(pod, true, "TmcNotApplied", fmt.Sprintf(
				"container %s names a DRA claim the node cannot read (%v): its memory is not counted against the node's placements",
				ctr.GetName(), err))
			return nil, "", false
		}
		return pl, group, true
	}
	pl, err := ParsePlacement(pod.GetAnnotations())
	if pl == nil || err != nil || pl.Node != p.cfg.NodeName || !v1alpha1.IsTieredPod(pod.GetLabels()) || p.tenant(pod.GetNamespace()) == tenantNot ||
		p.cfg.Seals.Verify(pod.GetUid(), pod.GetAnnotations()) != nil {
		return nil, "", false
	}
	return pl, "", false
}

func (p *Plugin) recordPath(uid, container string) (string, bool) {
	if !uidText.MatchString(uid) || !nameText.MatchString(container) {
		return "", false
	}
	return filepath.Join(p.cfg.PlanDir, RecordDir, uid, container+".json"), true
}

func (p *Plugin) writeRecord(rec *Record) error {
	path, ok := p.recordPath(rec.UID, rec.Container)
	if !ok {
		return fmt.Errorf("no record path for %q/%q", clip(rec.UID, 70), clip(rec.Container, 70))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeAtomic(path, string(data)+"\n")
}

// writeAtomic replaces path at once: a reader sees the old file or the whole new one.
func writeAtomic(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// InstallShim copies the allocator shim the plugin's image carries into the node's shim directory
// when none is there yet (the agent replaces it with one built by the node's own compiler, when
// the node has one): a placed container then finds it on every node. Atomic: a container being
// created maps the old file or the whole new one.
func InstallShim(bundled, shimDir string) (bool, error) {
	if bundled == "" || shimDir == "" {
		return false, nil
	}
	dest := filepath.Join(shimDir, shimName)
	if _, err := os.Stat(dest); err == nil {
		return false, nil
	}
	data, err := os.ReadFile(bundled)
	if err != nil {
		return false, fmt.Errorf("the image's shim: %w", err)
	}
	if err := os.MkdirAll(shimDir, 0o755); err != nil {
		return false, err
	}
	tmp := filepath.Join(shimDir, "."+shimName+".tmp")
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, dest)
}

// MemoryLimit is the memory limit a placement sets on a container whose own limit is own (0 for
// none), and whether it sets one. The engine sizes a placement from its pod's memory request,
// so the placement's DRAM and slow bytes together are at least what any one container of the
// pod asked for: a container without a limit is held to them. A placement sized otherwise (a pod
// that requests no memory is reserved its recommendation's own bytes, sized_from says so) sets
// no limit: the pod never asked for those bytes and may need more, and the node cannot see the
// pod's request to judge them against it. A container's own limit
// is what its pod asked for and is never lowered, since a profile traced on a small input must
// not cut a pod deployed on its real one. Adjust reads this one rule for every path that
// applies a placement.
func MemoryLimit(pl *Placement, own int64) (int64, bool) {
	limit := pl.Configuration.DRAMBytes + pl.Configuration.SlowBytes
	if own > 0 || limit <= 0 || !pl.SizedFromRequest() {
		return 0, false
	}
	return limit, true
}

// untiered is why a placement on a pod without the tiered pod label (v1alpha1.IsTieredPod, the
// engine's rule too) is neither applied nor held: tmc's admission policies judge only labelled
// pods, so a placement on any other was written by whoever could write the pod.
const untiered = "the pod is not labelled " + v1alpha1.TieredPodLabel + "=" + v1alpha1.TieredPodLabelValue +
	" (tmc's admission policy guards only labelled pods' placements)"

type tenancy int

const (
	tenantYes tenancy = iota
	tenantNot
	tenantUnknown
)

// tenant judges a pod's namespace by the selector (v1alpha1.TenantNamespaces, the engine's rule
// too): unknown until the namespaces are listed, and for a namespace not listed at all (made
// after the last event seen, or no informer): the kubelet retries, by when it is known.
func (p *Plugin) tenant(namespace string) tenancy {
	return tenantOf(p.cfg.Tenants, p.cfg.Namespaces, namespace)
}

func tenantOf(tenants *v1alpha1.TenantNamespaces, namespaces Namespaces, namespace string) tenancy {
	if tenants.Every() {
		return tenantYes
	}
	if namespaces == nil || !namespaces.Synced() {
		return tenantUnknown
	}
	labels, ok := namespaces.Labels(namespace)
	switch {
	case !ok:
		return tenantUnknown
	case tenants.Selects(labels):
		return tenantYes
	default:
		return tenantNot
	}
}
