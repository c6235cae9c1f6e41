package v1alpha1

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The placement annotations, read by the engine (a bound pod's reservation) and by the node
// (what its runtime applies), with the one parser below so that the two never disagree on
// what a placement says or whether it can be trusted.
const (
	PlacementAnnotation = Group + "/placement"
	LLCMaskAnnotation   = Group + "/llc-mask"
	// MaxPlacementAnnotationBytes is the API server's own limit on all of a pod's annotations:
	// nothing longer is a placement.
	MaxPlacementAnnotationBytes = 256 * 1024
	// DefaultObjective is a placement's objective when it names none.
	DefaultObjective = "cheapest"
)

var (
	hexMask            = regexp.MustCompile(`^0x[0-9a-fA-F]{1,16}$`)
	tagText            = regexp.MustCompile(`^[A-Za-z0-9_.:/()\[\]<>-]+$`)
	fallbackReasonCode = regexp.MustCompile(`^[A-Z][A-Za-z]{0,63}$`)
	objectName         = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	objectUID          = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// PlacementError says why a placement annotation cannot be trusted.
//
// +kubebuilder:object:generate=false
type PlacementError struct{ Msg string }

func (e *PlacementError) Error() string { return e.Msg }

func placementErrorf(format string, args ...any) error {
	return &PlacementError{Msg: fmt.Sprintf(format, args...)}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ParsePlacement reads a pod's placement annotations (model.node_contract's
// Placement.from_annotations): (nil, nil) for a pod tmc did not place (no placement, or an
// empty one), a *PlacementError for one whose placement cannot be trusted: longer than the
// API server allows, not one JSON object of the contract's fields with only whitespace after
// it (DecodeOne), with a null or an empty field no writer writes (refuseUnwritten), outside the
// contract's bounds (Validate), or with a tmc.dev/llc-mask that disagrees. It never panics:
// every number is range-checked before use.
func ParsePlacement(ann map[string]string) (*Placement, error) {
	raw := ann[PlacementAnnotation]
	if raw == "" {
		return nil, nil
	}
	if len(raw) > MaxPlacementAnnotationBytes {
		return nil, placementErrorf("%s is not a JSON string under 256 KiB", PlacementAnnotation)
	}
	var p Placement
	if err := DecodeOne(raw, &p); err != nil {
		return nil, placementErrorf("%s: %s", PlacementAnnotation, clip(err.Error(), 200))
	}
	if err := refuseUnwritten(raw); err != nil {
		return nil, err
	}
	if p.Schema == "" {
		p.Schema = PlacementSchema
	}
	if p.Objective == "" {
		p.Objective = DefaultObjective
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if side, ok := ann[LLCMaskAnnotation]; ok {
		v, err := strconv.ParseUint(strings.TrimPrefix(side, "0x"), 16, 64)
		if !hexMask.MatchString(side) || err != nil || v != p.LLCMaskBits() {
			return nil, placementErrorf("%s %q disagrees with the placement", LLCMaskAnnotation, clip(side, 40))
		}
	}
	return &p, nil
}

// refuseUnwritten refuses what Placement's fields would read but no writer writes and
// model.node_contract refuses: a null where the contract allows none (decoded, a null is the
// field's zero value, and a null structure in plan a zero one) and an empty fallback_reason ("" is
// an absent reason). The text itself is asked, in one pass over its bytes that allocates nothing:
// raw is one JSON object of Placement's fields (DecodeOne found it so), so outside strings an 'n'
// starts a null, a string followed by ':' is a key, and no object is nested past plan's structures.
func refuseUnwritten(raw string) error {
	var keys [4]string // the key whose value is being read, at each depth (1: the placement's own)
	// The keys the object open at each depth has given: a key given twice is refused, since the
	// decoders keep the last value and this scan would judge the first (no writer repeats a key).
	var given [4][maxPlacementObjectKeys]string
	var counts [4]int
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '{', '[':
			if depth++; depth == len(keys) {
				return placementErrorf("%s: nested deeper than a placement's fields", PlacementAnnotation)
			}
			keys[depth] = "" // a list's items have no key
			counts[depth] = 0
		case '}', ']':
			depth--
		case '"':
			end := i + 1
			for end < len(raw) && raw[end] != '"' {
				if raw[end] == '\\' {
					end++
				}
				end++
			}
			text := raw[i:min(end+1, len(raw))]
			next := end + 1
			for next < len(raw) && strings.IndexByte(" \t\r\n", raw[next]) >= 0 {
				next++
			}
			switch {
			case next < len(raw) && raw[next] == ':':
				keys[depth] = jsonKey(text)
				if !writtenKey(keys[:depth+1]) {
					return placementErrorf("%s: %s: not a field (names are matched exactly, case included)",
						PlacementAnnotation, nullPath(keys[1:depth+1]))
				}
				// Every key is a field's name (above), so an object with more keys than any
				// object of a placement has fields repeats one.
				seen := given[depth][:counts[depth]]
				if slices.Contains(seen, keys[depth]) || counts[depth] == maxPlacementObjectKeys {
					return placementErrorf("%s: %s: given twice", PlacementAnnotation, nullPath(keys[1:depth+1]))
				}
				given[depth][counts[depth]] = keys[depth]
				counts[depth]++
			case depth == 1 && keys[1] == "fallback_reason" && text == `""`:
				return placementErrorf("%s: fallback_reason: absent or a code, never empty", PlacementAnnotation)
			}
			i = end
		case 'n':
			if !nullable(keys[:depth+1]) {
				return placementErrorf("%s: %s: never null", PlacementAnnotation, nullPath(keys[1:depth+1]))
			}
			i += len("null") - 1
		}
	}
	return nil
}

// placementFields are the JSON names of each object a placement holds, read from the types' tags:
// encoding/json matches a key to a field ignoring case ("NODE" is node), while model.node_contract
// matches names exactly and refuses any other as unknown, so the readers agree only if a key is
// one of these names as written.
var placementFields = map[string]map[string]bool{
	"":              jsonNames(reflect.TypeOf(Placement{})),
	"configuration": jsonNames(reflect.TypeOf(PlacedConfiguration{})),
	"plan":          jsonNames(reflect.TypeOf(StructurePlan{})),
	"plan_from":     jsonNames(reflect.TypeOf(PlanSource{})),
}

// maxPlacementObjectKeys bounds the keys of one object of a placement: more than the fields of
// the largest (Placement's own).
const maxPlacementObjectKeys = 16

// jsonNames are the names a struct's fields are written under (their json tags).
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// writtenKey says whether the last of keys (keys[1] the placement's own field) is a field's name
// exactly as the writers write it, in the object the keys before it lead to.
func writtenKey(keys []string) bool {
	var object string
	switch {
	case len(keys) == 2:
		object = ""
	case len(keys) == 3 && (keys[1] == "configuration" || keys[1] == "plan_from"):
		object = keys[1]
	case len(keys) == 4 && keys[1] == "plan" && keys[2] == "":
		object = "plan"
	default:
		return true // no object of a placement's holds keys there; the decoder refuses the shape
	}
	return placementFields[object][keys[len(keys)-1]]
}

// nullable says whether the value of the keys (keys[1] the placement's own field) may be null:
// the fields model.node_contract reads as X | None, which the contract marks +nullable or leaves
// out when absent (Placement's and PlanSource's pointers, and fallback_reason). Null anywhere else
// (schema, objective, slow_from_pool, plan, configuration or a number in it, a structure or its
// bytes) is a value no writer writes.
func nullable(keys []string) bool {
	switch {
	case len(keys) == 2:
		switch keys[1] {
		case "workload", "recommendation_id", "fallback", "fallback_reason", "plan_from", "sized_from":
			return true
		}
	case len(keys) == 3:
		return keys[1] == "plan_from" && keys[2] == "uid"
	}
	return false
}

// jsonKey is a quoted key's text: escapes are read (rarely written, and only then allocated for),
// so that a key spelt with them means what it means to the decoders.
func jsonKey(quoted string) string {
	if strings.IndexByte(quoted, '\\') < 0 {
		return strings.Trim(quoted, `"`)
	}
	var key string
	if json.Unmarshal([]byte(quoted), &key) != nil {
		return quoted
	}
	return key
}

// nullPath names a refused null's place for the error ("configuration.slow_bytes", "plan[]").
func nullPath(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		switch {
		case k == "":
			b.WriteString("[]")
		case b.Len() > 0:
			b.WriteString("." + k)
		default:
			b.WriteString(k)
		}
	}
	if b.Len() == 0 {
		return "the placement"
	}
	return b.String()
}

// DecodeOne reads raw as one JSON value into v as model.node_contract's pydantic models read a
// contract's text (model_validate_json): a field v does not have is refused (the contract
// forbids extra fields), and so is anything but JSON whitespace after the value, so that the
// Go and Python readers never disagree on whether a text is one value. json.Decoder.More does
// not tell: it reports no further value before a stray ']' or '}', which would read `{...}]`.
func DecodeOne(raw string, v any) error {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if rest := raw[dec.InputOffset():]; strings.TrimLeft(rest, " \t\r\n") != "" {
		return fmt.Errorf("%q after the JSON value, where only whitespace may follow", clip(rest, 20))
	}
	return nil
}

// Validate holds a placement to the contract's bounds (the markers on Placement spell the same
// numbers), so that the scheduler never writes one the node would refuse, nor counts one it
// cannot read, and the node applies none it should not.
func (p *Placement) Validate() error {
	bad := func(format string, args ...any) error {
		return placementErrorf(PlacementAnnotation+": "+format, args...)
	}
	c := p.Configuration
	switch {
	case p.Schema != PlacementSchema && p.Schema != PlacementSchemaV1 && p.Schema != PlacementSchemaV3:
		return bad("schema %q is not tmc.placement/v1, v2 or v3", clip(p.Schema, 40))
	case p.PlanFrom != nil && p.Schema != PlacementSchemaV3:
		return bad("plan_from: only in tmc.placement/v3")
	case p.PlanFrom != nil && (p.PlanFrom.Recommendation == "" || len(p.PlanFrom.Recommendation) > 253 || !objectName.MatchString(p.PlanFrom.Recommendation)):
		return bad("plan_from.recommendation: must be an object name of 1..253 characters")
	case p.PlanFrom != nil && p.PlanFrom.Generation < 1:
		return bad("plan_from.generation: must be at least 1")
	case p.PlanFrom != nil && p.PlanFrom.UID != nil && !objectUID.MatchString(*p.PlanFrom.UID):
		return bad("plan_from.uid: must be an object uid of 1..64 letters, digits and dashes")
	case p.PlanFrom != nil && (len(p.Plan) > 0 || p.Fallback != nil):
		return bad("plan_from: given with a plan or a fallback")
	case p.SizedFrom != nil && *p.SizedFrom != SizedFromRequest && *p.SizedFrom != SizedFromRecommendation:
		return bad("sized_from: must be request or recommendation")
	case p.SizedFrom != nil && *p.SizedFrom == SizedFromRecommendation && p.Fallback != nil:
		return bad("sized_from: a fallback is the pod's request, not a recommendation's")
	case p.Node == "" || len(p.Node) > 253:
		return bad("node: must be 1..253 characters")
	case p.Workload != nil && len(*p.Workload) > 253:
		return bad("workload: longer than 253 characters")
	case len(p.Objective) > 64:
		return bad("objective: longer than 64 characters")
	case p.RecommendationID != nil && len(*p.RecommendationID) > 64:
		return bad("recommendation_id: longer than 64 characters")
	case p.Fallback != nil && len(*p.Fallback) > 512:
		return bad("fallback: longer than 512 characters")
	case p.FallbackReason != "" && !fallbackReasonCode.MatchString(string(p.FallbackReason)):
		return bad("fallback_reason: must be one CamelCase word of at most 64 letters")
	case p.FallbackReason != "" && p.Fallback == nil:
		return bad("fallback_reason: given without a fallback")
	case c.VCPUs < 1 || c.VCPUs > MaxCPUs:
		return bad("configuration.vcpus: must be in 1..%d", MaxCPUs)
	case c.DRAMBytes < 0 || c.DRAMBytes >= MaxBytes || c.SlowBytes < 0 || c.SlowBytes >= MaxBytes:
		return bad("configuration: bytes must be in 0..2^52")
	case !(c.SlowRatio >= 0 && c.SlowRatio <= 1):
		return bad("configuration.slow_ratio: must be in 0..1")
	case c.LLCWays < 1 || c.LLCWays > MaxLLCWays:
		return bad("configuration.llc_ways: must be in 1..%d", MaxLLCWays)
	case !hexMask.MatchString(p.LLCMask):
		return bad("llc_mask: must be a hex CAT mask such as 0xf0 (at most 64 bits)")
	case !contiguous(p.LLCMaskBits()):
		return bad("llc_mask: must be a non-empty run of contiguous ways")
	case bits.OnesCount64(p.LLCMaskBits()) != c.LLCWays:
		return bad("llc_mask and configuration.llc_ways disagree")
	case len(p.Plan) > MaxPlanStructures:
		return bad("plan: more than %d structures", MaxPlanStructures)
	}
	// The sums are compared as they grow: each term is under 2^52 and each running sum stays at
	// most the configuration's (under 2^52), so no sum can overflow, however many structures
	// (4,096 of almost 2^52 bytes would wrap an int64 past the check).
	var fast, slow int64
	for _, s := range p.Plan {
		if len(s.Tag) > 128 || !tagText.MatchString(s.Tag) {
			return bad("plan: tag %q is not in the bundle's tag alphabet", clip(s.Tag, 40))
		}
		if s.FastBytes < 0 || s.FastBytes >= MaxBytes || s.SlowBytes < 0 || s.SlowBytes >= MaxBytes {
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

// contiguous: one non-empty run of ways, as CAT requires.
func contiguous(mask uint64) bool {
	low := mask & -mask
	return mask != 0 && (mask+low)&mask == 0
}

// SizePlan is a recommendation's plan at a configuration of other sizes: each structure's bytes
// in a tier scaled by that tier's new size (dram over fromDRAM, slow over fromSlow), rounded
// down, so that the plan never places more in a tier than the configuration holds. The engine
// sizes a pod's plan with it, and the node a plan it reads from the published recommendation:
// both get the same bytes. A tier the recommendation left empty stays empty.
func SizePlan(plan []StructurePlan, fromDRAM, fromSlow, dram, slow int64) []StructurePlan {
	if len(plan) == 0 || (dram == fromDRAM && slow == fromSlow) {
		return plan
	}
	out := make([]StructurePlan, len(plan))
	for i, s := range plan {
		out[i] = StructurePlan{Tag: s.Tag, FastBytes: scaleBytes(s.FastBytes, dram, fromDRAM), SlowBytes: scaleBytes(s.SlowBytes, slow, fromSlow)}
	}
	return out
}

// scaleBytes is part × to / from, rounded down, computed exactly in 128 bits: part ≤ from, so the
// quotient is at most to.
func scaleBytes(part, to, from int64) int64 {
	if from <= 0 || part <= 0 || to <= 0 {
		return 0
	}
	part = min(part, from)
	hi, lo := bits.Mul64(uint64(part), uint64(to))
	q, _ := bits.Div64(hi, lo, uint64(from))
	return int64(q)
}
