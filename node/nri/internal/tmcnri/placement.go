package tmcnri

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// The pod annotations the node reads (model/node_contract.py). Only tmc's scheduler may write the
// placement (an admission policy enforces it); the node still checks every field, because it is
// the last place a stale or forged placement can be stopped before a process runs.
const (
	PlacementAnnotation       = v1alpha1.PlacementAnnotation
	LLCMaskAnnotation         = v1alpha1.LLCMaskAnnotation
	VerificationRunAnnotation = v1alpha1.Group + "/verification-run"

	// The API server's own limit on all of a pod's annotations: nothing longer is a placement.
	maxPlacementBytes = v1alpha1.MaxPlacementAnnotationBytes
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

// ParsePlacement reads a pod's placement annotations with the API types' one parser
// (v1alpha1.ParsePlacement, the engine's too): (nil, nil) for a pod tmc did not place (an empty
// annotation included, as the engine reads it), a *MalformedError for one whose placement
// cannot be trusted.
func ParsePlacement(ann map[string]string) (*Placement, error) {
	p, err := v1alpha1.ParsePlacement(ann)
	var bad *v1alpha1.PlacementError
	if errors.As(err, &bad) {
		return nil, &MalformedError{Msg: bad.Msg}
	}
	return p, err
}

func contiguous(mask uint64) bool {
	low := mask & -mask
	return mask != 0 && (mask+low)&mask == 0
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
