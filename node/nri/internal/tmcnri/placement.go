package tmcnri

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// The pod annotations the node reads (model/node_contract.py). Only tmc's scheduler may write the
// placement (an admission policy enforces it); the node still checks every field, because it is
// the last place a stale or forged placement can be stopped before a process runs.
const (
	PlacementAnnotation       = v1alpha1.Group + "/placement"
	LLCMaskAnnotation         = v1alpha1.Group + "/llc-mask"
	VerificationRunAnnotation = v1alpha1.Group + "/verification-run"

	// The API server's own limit on all of a pod's annotations: nothing longer is a placement.
	maxPlacementBytes = 256 * 1024
)

var (
	hexMask = regexp.MustCompile(`^0x[0-9a-fA-F]{1,16}$`)
	tagText = regexp.MustCompile(`^[A-Za-z0-9_.:/()\[\]<>-]+$`)
)

// Placement is what tmc's scheduler gave a pod, read and checked.
type Placement = v1alpha1.Placement

// MalformedError says why a placement annotation cannot be read.
type MalformedError struct{ Msg string }

func (e *MalformedError) Error() string { return e.Msg }

func malformed(format string, args ...any) error {
	return &MalformedError{Msg: fmt.Sprintf(format, args...)}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ParsePlacement reads a pod's placement annotations with the contract's bounds: (nil, nil) for a
// pod tmc did not place, a *MalformedError for one whose placement cannot be trusted. It never
// panics: every number is range-checked before use, and the sums stop growing once they pass
// the configuration's (so 4,096 structures of almost 2^52 bytes cannot wrap an int64).
func ParsePlacement(ann map[string]string) (*Placement, error) {
	raw, ok := ann[PlacementAnnotation]
	if !ok {
		return nil, nil
	}
	if raw == "" || len(raw) > maxPlacementBytes {
		return nil, malformed("%s is empty or longer than 256 KiB", PlacementAnnotation)
	}
	var p Placement
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields() // the contract forbids extra fields
	if err := dec.Decode(&p); err != nil {
		return nil, malformed("%s: %s", PlacementAnnotation, clip(err.Error(), 200))
	}
	if dec.More() {
		return nil, malformed("%s: more than one JSON value", PlacementAnnotation)
	}
	if p.Schema == "" {
		p.Schema = v1alpha1.PlacementSchema
	}
	if err := checkPlacement(&p); err != nil {
		return nil, err
	}
	if side, ok := ann[LLCMaskAnnotation]; ok {
		v, err := strconv.ParseUint(strings.TrimPrefix(side, "0x"), 16, 64)
		if !hexMask.MatchString(side) || err != nil || v != p.LLCMaskBits() {
			return nil, malformed("%s %q disagrees with the placement", LLCMaskAnnotation, clip(side, 40))
		}
	}
	return &p, nil
}

func contiguous(mask uint64) bool {
	low := mask & -mask
	return mask != 0 && (mask+low)&mask == 0
}

func checkPlacement(p *Placement) error {
	bad := func(format string, args ...any) error {
		return malformed(PlacementAnnotation+": "+format, args...)
	}
	c := p.Configuration
	switch {
	case p.Schema != v1alpha1.PlacementSchema && p.Schema != v1alpha1.PlacementSchemaV1:
		return bad("schema %q is not tmc.placement/v1 or v2", clip(p.Schema, 40))
	case p.Node == "" || len(p.Node) > 253:
		return bad("node: must be 1..253 characters")
	case c.VCPUs < 1 || c.VCPUs > v1alpha1.MaxCPUs:
		return bad("configuration.vcpus: must be in 1..%d", v1alpha1.MaxCPUs)
	case c.DRAMBytes < 0 || c.DRAMBytes >= v1alpha1.MaxBytes || c.SlowBytes < 0 || c.SlowBytes >= v1alpha1.MaxBytes:
		return bad("configuration: bytes must be in 0..2^52")
	case !(c.SlowRatio >= 0 && c.SlowRatio <= 1):
		return bad("configuration.slow_ratio: must be in 0..1")
	case c.LLCWays < 1 || c.LLCWays > v1alpha1.MaxLLCWays:
		return bad("configuration.llc_ways: must be in 1..%d", v1alpha1.MaxLLCWays)
	case !hexMask.MatchString(p.LLCMask):
		return bad("llc_mask: must be a hex CAT mask such as 0xf0 (at most 64 bits)")
	case !contiguous(p.LLCMaskBits()):
		return bad("llc_mask: must be a non-empty run of contiguous ways")
	case bits.OnesCount64(p.LLCMaskBits()) != int(c.LLCWays):
		return bad("llc_mask and configuration.llc_ways disagree")
	case len(p.Plan) > v1alpha1.MaxPlanStructures:
		return bad("plan: more than %d structures", v1alpha1.MaxPlanStructures)
	}
	var fast, slow int64
	for _, s := range p.Plan {
		if len(s.Tag) > 128 || !tagText.MatchString(s.Tag) {
			return bad("plan: tag %q is not in the bundle's tag alphabet", clip(s.Tag, 40))
		}
		if s.FastBytes < 0 || s.FastBytes >= v1alpha1.MaxBytes || s.SlowBytes < 0 || s.SlowBytes >= v1alpha1.MaxBytes {
			return bad("plan: bytes must be in 0..2^52")
		}
		fast += s.FastBytes
		slow += s.SlowBytes
		if fast > c.DRAMBytes || slow > c.SlowBytes {
			return bad("the plan places more in a tier than the configuration holds")
		}
	}
	return nil
}

// RenderPlan is the allocator shim's plan file for a placement (model/node_contract.py's
// render_plan_file, byte for byte: both are checked against the same golden files): the two NUMA
// nodes and, per tagged structure, the bytes it may place on the fast node. A tag the plan does
// not name may use what the plan leaves of the pod's DRAM; without a plan, the whole of it.
func RenderPlan(p *Placement, fastNode, slowNode int, who string) string {
	var b bytes.Buffer
	b.WriteString("# tmc placement plan v1")
	if who != "" {
		b.WriteString(" for " + who)
	}
	fmt.Fprintf(&b, "\nfast_node %d\nslow_node %d\n", fastNode, slowNode)
	dram := p.Configuration.DRAMBytes
	fast := map[string]int64{}
	slow := map[string]int64{}
	var sum int64
	for _, s := range p.Plan {
		// A repeated tag: the last one wins, as in a Python dict built from the list.
		fast[s.Tag] = s.FastBytes
		slow[s.Tag] = s.SlowBytes
	}
	for _, v := range fast {
		sum += v
	}
	def := dram
	if len(fast) > 0 {
		def = max(0, dram-sum)
	}
	fmt.Fprintf(&b, "default_fast_bytes %d\n", def)
	tags := make([]string, 0, len(fast))
	for t := range fast {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	for _, t := range tags {
		fmt.Fprintf(&b, "tag %s %d %d\n", t, fast[t], slow[t])
	}
	return b.String()
}
