package tmc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// The names of model/node_contract.py: what crosses between the scheduler and the node. The
// node agent and the publisher's feeder (both Python) read and write the same keys, so they are
// spelled once here and must never drift from the Python definitions (contract_test.go and
// tests/scheduler/test_contract_schema.py hold the two sides together).
const (
	Group = v1alpha1.Group

	// OptInResource is the extended resource a pod requests to be placed by tmc.
	OptInResource = Group + "/tiered"

	WorkloadAnnotation  = Group + "/workload"
	ObjectiveAnnotation = Group + "/objective"

	PlacementAnnotation = v1alpha1.PlacementAnnotation
	LLCMaskAnnotation   = v1alpha1.LLCMaskAnnotation

	HostKindLabel           = Group + "/host-kind"
	CPUsAnnotation          = Group + "/cpus"
	DRAMAnnotation          = Group + "/dram-bytes"
	SlowAnnotation          = Group + "/slow-bytes"
	LLCWaysAnnotation       = Group + "/llc-ways"
	SlowPoolAnnotation      = Group + "/slow-pool"
	SlowPoolBytesAnnotation = Group + "/slow-pool-bytes"
	PlacementSchema         = v1alpha1.PlacementSchema
	PlacementSchemaV3       = v1alpha1.PlacementSchemaV3

	// MaxBytes, MaxLLCWays and MaxCPUs bound every number of the contract so that no annotation,
	// however it was written, can overflow a computation downstream.
	MaxBytes   = v1alpha1.MaxBytes
	MaxLLCWays = v1alpha1.MaxLLCWays
	MaxCPUs    = v1alpha1.MaxCPUs

	// RequiredPluginsAnnotation is NRI's: the node plugins that must have processed each of the
	// pod's containers at creation, or the runtime's default validator refuses the container
	// (containerd 2.x with [plugins."io.containerd.nri.v1.nri".default_validator] enable).
	RequiredPluginsAnnotation = "required-plugins.noderesource.dev/pod"
)

// The contract's shapes are the API types (pkg/apis/tmc/v1alpha1); the engine reads and writes
// them with the rules below.
type (
	NodeCapacity        = v1alpha1.NodeCapacity
	StructurePlan       = v1alpha1.StructurePlan
	PlanSource          = v1alpha1.PlanSource
	PlacedConfiguration = v1alpha1.PlacedConfiguration
	Placement           = v1alpha1.Placement
	PyFloat             = v1alpha1.PyFloat
	NodePattern         = v1alpha1.NodePattern
	PatternSlot         = v1alpha1.PatternSlot
	Recommendation      = v1alpha1.Recommendation
	FallbackReason      = v1alpha1.FallbackReason
)

var dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// labelValue is a host kind's grammar, a Kubernetes label value's (the agent writes it as the
// tmc.dev/host-kind label), as model.node_contract.NodeCapacity reads it.
var labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// asciiSpace is what intAnnotation trims, as the Python contract does: strings.TrimSpace would
// also take Unicode spaces, and Python's str.strip \x1c-\x1f as well.
const asciiSpace = " \t\n\v\f\r"

// ContractError is metadata that claims to follow the contract but cannot be read.
type ContractError struct{ Msg string }

func (e *ContractError) Error() string { return e.Msg }

func contractErrorf(format string, args ...any) error {
	return &ContractError{Msg: fmt.Sprintf(format, args...)}
}

// intAnnotation reads a decimal annotation as the Python contract does: ASCII digits only, at
// most 19 of them (bounded before conversion), with ASCII whitespace around them, absent or
// empty meaning "not given".
func intAnnotation(ann map[string]string, key string) (int64, bool, error) {
	raw, ok := ann[key]
	if !ok || raw == "" {
		return 0, false, nil
	}
	text := strings.Trim(raw, asciiSpace)
	if text == "" || len(text) > 19 || strings.TrimLeft(text, "0123456789") != "" {
		return 0, false, contractErrorf("%s: %q is not a non-negative integer below 2^63", key, clip(text, 40))
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, false, contractErrorf("%s: %q is not a non-negative integer below 2^63", key, clip(text, 40))
	}
	return v, true, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ParseNodeCapacity is NodeCapacity.from_metadata: (nil, nil) for a node that publishes no tiered
// capacity (not a tmc node), an error for one that publishes it unreadably.
func ParseNodeCapacity(labels, ann map[string]string) (*NodeCapacity, error) {
	if _, ok := ann[DRAMAnnotation]; !ok {
		return nil, nil
	}
	if _, ok := ann[LLCWaysAnnotation]; !ok {
		return nil, nil
	}
	c := &NodeCapacity{HostKind: "unknown"}
	if v := labels[HostKindLabel]; v != "" {
		c.HostKind = v
	} else if v := ann[HostKindLabel]; v != "" {
		c.HostKind = v
	}
	if len(c.HostKind) > 63 {
		return nil, contractErrorf("node capacity: host_kind: longer than 63 characters")
	}
	if !labelValue.MatchString(c.HostKind) {
		return nil, contractErrorf("node capacity: host_kind: %q is not a label value", clip(c.HostKind, 40))
	}
	cpus, hasCPUs, err := intAnnotation(ann, CPUsAnnotation)
	if err != nil {
		return nil, err
	}
	if hasCPUs {
		if cpus < 1 || cpus > MaxCPUs {
			return nil, contractErrorf("node capacity: cpus: must be in 1..%d", MaxCPUs)
		}
		c.CPUs = cpus
	}
	dram, hasDRAM, err := intAnnotation(ann, DRAMAnnotation)
	if err != nil {
		return nil, err
	}
	if !hasDRAM {
		return nil, contractErrorf("node capacity: dram_bytes: missing")
	}
	if c.DRAMBytes, err = boundedBytes("dram_bytes", dram); err != nil {
		return nil, err
	}
	slow, _, err := intAnnotation(ann, SlowAnnotation)
	if err != nil {
		return nil, err
	}
	if c.SlowBytes, err = boundedBytes("slow_bytes", slow); err != nil {
		return nil, err
	}
	ways, hasWays, err := intAnnotation(ann, LLCWaysAnnotation)
	if err != nil {
		return nil, err
	}
	if !hasWays || ways < 1 || ways > MaxLLCWays {
		return nil, contractErrorf("node capacity: llc_ways: must be in 1..%d", MaxLLCWays)
	}
	c.LLCWays = int(ways)
	if pool := ann[SlowPoolAnnotation]; pool != "" {
		if len(pool) > 253 || !dnsName.MatchString(pool) {
			return nil, contractErrorf("node capacity: slow_pool: %q is not a DNS subdomain name", clip(pool, 40))
		}
		c.SlowPool = pool
		poolBytes, has, err := intAnnotation(ann, SlowPoolBytesAnnotation)
		if err != nil {
			return nil, err
		}
		if has {
			bounded, err := boundedBytes("slow_pool_bytes", poolBytes)
			if err != nil {
				return nil, err
			}
			c.SlowPoolBytes = &bounded
		}
	}
	return c, nil
}

func boundedBytes(field string, v int64) (int64, error) {
	if v < 0 || v >= MaxBytes {
		return 0, contractErrorf("node capacity: %s: must be below 2^52", field)
	}
	return v, nil
}

// FormatMask writes a CAT mask as Python's hex() does: lower case, no leading zeros.
func FormatMask(mask uint64) string { return "0x" + strconv.FormatUint(mask, 16) }

// PlacementAnnotations are the two annotations the Binding writes: the placement as compact
// JSON (the encoding of Python's json.dumps with separators (",", ":") and ensure_ascii, so that
// every reader sees one spelling) and the mask, redundantly, for tools that read one value.
func PlacementAnnotations(p *Placement) (map[string]string, error) {
	if err := validatePlacement(p); err != nil {
		return nil, err
	}
	body := *p
	if body.Plan == nil {
		body.Plan = []StructurePlan{} // Python writes [], never null
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // Python leaves < > & alone, and tags may hold < and >
	if err := enc.Encode(body); err != nil {
		return nil, err
	}
	text := asciiOnly(strings.TrimSuffix(buf.String(), "\n"))
	return map[string]string{PlacementAnnotation: text, LLCMaskAnnotation: p.LLCMask}, nil
}

// asciiOnly escapes every non-ASCII character as \uXXXX (UTF-16 surrogates above U+FFFF), as
// Python's ensure_ascii does. Only string contents can hold such characters, and inside a JSON
// string the escape means the same character.
func asciiOnly(s string) string {
	ascii := true
	for i := 0; i < len(s) && ascii; i++ {
		ascii = s[i] < utf8.RuneSelf
	}
	if ascii {
		return s // the usual placement: nothing to escape, nothing to copy
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// ParsePlacement is Placement.from_annotations (v1alpha1.ParsePlacement, the one reader the
// node shares): (nil, nil) when the pod has no placement, a *ContractError when it has an
// unreadable one or the two annotations disagree.
func ParsePlacement(ann map[string]string) (*Placement, error) {
	p, err := v1alpha1.ParsePlacement(ann)
	return p, asContractError(err)
}

// validatePlacement holds a placement to the contract's bounds (Placement.Validate), so that
// the scheduler never writes one the node would refuse, nor counts one it cannot read.
func validatePlacement(p *Placement) error { return asContractError(p.Validate()) }

// asContractError is the API types' refusal of a placement as the engine's ContractError.
func asContractError(err error) error {
	var bad *v1alpha1.PlacementError
	if errors.As(err, &bad) {
		return &ContractError{Msg: bad.Msg}
	}
	return err
}

// MaxPlacementAnnotationsBytes bounds what a Binding adds to a pod (both annotations, keys
// and values): a quarter of the API server's 256 KiB for all of a pod's annotations, so that
// the pod's own annotations and later writers keep room. A recommendation whose placement would
// be larger is not bound: the pod gets the fallback, which says why.
const MaxPlacementAnnotationsBytes = 64 * 1024

// maxPodAnnotationsAfterBind is the most a pod's annotations may hold once placed (the API
// server refuses every later update of a pod past 256 KiB, though a Binding is not checked).
const maxPodAnnotationsAfterBind = 192 * 1024

// annotationsSize is what the API server counts against its limit: keys and values.
func annotationsSize(ann map[string]string) int {
	n := 0
	for k, v := range ann {
		n += len(k) + len(v)
	}
	return n
}

// The machine pattern (model/node_contract.py's NodePattern): the capacity plan's machine a node
// stands for, written by the operator (`tmc plan patterns apply`), read by placement.
const (
	PatternAnnotation    = Group + "/pattern"
	PatternSchema        = v1alpha1.PatternSchema
	MaxPatternSlots      = v1alpha1.MaxPatternSlots
	MaxSlotVMs           = v1alpha1.MaxSlotVMs
	MaxPatternMachines   = v1alpha1.MaxPatternMachines
	maxPatternAnnotation = 64 * 1024
)

var planName = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// ParsePattern is NodePattern.from_annotations: (nil, nil) when the node carries no pattern, an
// error when it carries one that cannot be read (placement then treats the node as having none).
func ParsePattern(ann map[string]string) (*NodePattern, error) {
	raw, ok := ann[PatternAnnotation]
	if !ok || raw == "" {
		return nil, nil
	}
	if len(raw) > maxPatternAnnotation {
		return nil, contractErrorf("%s is not a JSON string under 64 KiB", PatternAnnotation)
	}
	var p struct {
		Schema  *string        `json:"schema"`
		Plan    *string        `json:"plan"`
		Machine *int           `json:"machine"`
		Slots   *[]PatternSlot `json:"slots"`
	}
	// One object of the model's fields and only whitespace after it, as the Python model reads
	// it (json.Decoder.More would let `{...}]` through).
	if err := v1alpha1.DecodeOne(raw, &p); err != nil {
		return nil, contractErrorf("%s: %s", PatternAnnotation, clip(err.Error(), 200))
	}
	bad := func(format string, args ...any) error {
		return contractErrorf(PatternAnnotation+": "+format, args...)
	}
	out := &NodePattern{Schema: PatternSchema}
	if p.Schema != nil && *p.Schema != PatternSchema {
		return nil, bad("schema %q is not %s", clip(*p.Schema, 40), PatternSchema)
	}
	if p.Plan == nil || p.Machine == nil || p.Slots == nil {
		return nil, bad("plan, machine and slots are required")
	}
	out.Plan, out.Machine, out.Slots = *p.Plan, *p.Machine, *p.Slots
	switch {
	case out.Plan == "" || len(out.Plan) > 64 || !planName.MatchString(out.Plan):
		return nil, bad("plan: 1..64 characters of A-Z a-z 0-9 . _ : -")
	case out.Machine < 0 || out.Machine >= MaxPatternMachines:
		return nil, bad("machine: must be in 0..%d", MaxPatternMachines-1)
	case len(out.Slots) > MaxPatternSlots:
		return nil, bad("slots: more than %d", MaxPatternSlots)
	}
	seen := map[PlacedKey]bool{}
	for i, s := range out.Slots {
		switch {
		case s.Workload == "" || len(s.Workload) > 253:
			return nil, bad("slots.%d.workload: must be 1..253 characters", i)
		case s.DRAMBytes < 0 || s.DRAMBytes >= MaxBytes || s.SlowBytes < 0 || s.SlowBytes >= MaxBytes:
			return nil, bad("slots.%d: bytes must be in 0..2^52", i)
		case s.LLCWays < 1 || s.LLCWays > MaxLLCWays:
			return nil, bad("slots.%d.llc_ways: must be in 1..%d", i, MaxLLCWays)
		case s.Count < 1 || s.Count > MaxSlotVMs:
			return nil, bad("slots.%d.count: must be in 1..%d", i, MaxSlotVMs)
		case seen[slotKey(s)]:
			return nil, bad("two slots name the same workload and configuration")
		}
		seen[slotKey(s)] = true
	}
	return out, nil
}

// slotKey is what a placed pod is counted by against the slot.
func slotKey(s PatternSlot) PlacedKey {
	return PlacedKey{Workload: s.Workload, DRAMBytes: s.DRAMBytes, SlowBytes: s.SlowBytes, LLCWays: s.LLCWays}
}
