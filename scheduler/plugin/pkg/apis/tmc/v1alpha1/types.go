package v1alpha1

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The contract's bounds. Every number is bounded so that no object or annotation, however it was
// written, can overflow a computation downstream: bytes below 2^52 (4 PiB), at most 64 LLC ways
// (CAT masks are 64-bit at most), at most 4,096 vCPUs. The markers below spell the same numbers.
const (
	MaxBytes           = int64(1) << 52
	MaxLLCWays         = 64
	MaxCPUs            = 4096
	MaxPlanStructures  = 4096
	MaxPatternSlots    = 64
	MaxSlotVMs         = 4096
	MaxPatternMachines = 100000

	RecommendationSchema = "tmc.recommendation/v1"
	PlacementSchema      = "tmc.placement/v2"
	PlacementSchemaV1    = "tmc.placement/v1"
	// PlacementSchemaV3 is a placement whose per-structure plan the node reads from the
	// published recommendation it names (plan_from), not from the pod.
	PlacementSchemaV3  = "tmc.placement/v3"
	PatternSchema      = "tmc.pattern/v1"
	RecommendationKind = "TieredRecommendation"
)

// StructurePlan is how much of one tagged structure goes to each tier.
type StructurePlan struct {
	// Tag names the structure as the workload's bundle tags it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/()\[\]<>-]+$`
	Tag string `json:"tag"`
	// FastBytes is the structure's bytes in the fast tier (DRAM).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	FastBytes int64 `json:"fast_bytes"`
	// SlowBytes is the structure's bytes in the slow tier (node-local or rack-pooled).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
}

// Recommendation is the configuration tmc recommends for a workload and objective, independent
// of any one pod: a TieredRecommendation's spec, or a pod's tmc.dev/recommendation annotation.
// vCPUs are not in it: a pod gets what it requests. Fallback set means tmc has no configuration
// for the pair: its pods get the fallback (all memory in DRAM) with this reason.
type Recommendation struct {
	// Schema is the recommendation's wire version, tmc.recommendation/v1.
	// +optional
	// +kubebuilder:validation:Enum=tmc.recommendation/v1
	Schema string `json:"schema,omitempty"`
	// Workload is the workload's name, as its pods' tmc.dev/workload annotation names it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Workload *string `json:"workload,omitempty"`
	// Objective is what the configuration was chosen for, canonical ("cheapest", "slo:5%", "least-dram:10%").
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Objective *string `json:"objective,omitempty"`
	// RecommendationID is the decision's id in the service's log.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RecommendationID *string `json:"recommendation_id,omitempty"`
	// DRAMBytes is the configuration's DRAM at the size it was priced for; a pod gets its own
	// memory request split by SlowRatio and the plan's shares.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes,omitempty"`
	// SlowBytes is the configuration's slow memory at the size it was priced for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes,omitempty"`
	// ProfileBytes is the footprint the workload's profile traced: a pod requesting less is
	// given its request all the same, and told so. 0: not said (the DRAM and slow bytes' sum).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	ProfileBytes int64 `json:"profile_bytes,omitempty"`
	// LLCWays is 0 only for a fallback.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways,omitempty"`
	// SlowRatio is the share of the pod's memory placed in the slow tier, 0..1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	SlowRatio float64 `json:"slow_ratio,omitempty"`
	// Plan is how much of each tagged structure goes to each tier.
	// +optional
	// +kubebuilder:validation:MaxItems=4096
	Plan []StructurePlan `json:"plan,omitempty"`
	// Fallback, when set, says why tmc has no configuration for the pair: its pods get the
	// fallback (all memory in DRAM).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Fallback *string `json:"fallback,omitempty"`
	// Alternatives are Algorithm 1's next configurations within the cost threshold T, in its
	// order after this one (lowest packing penalty first), at most three, each sized as this one
	// is (dram_bytes and slow_bytes add up to the same size). A DRA claim template offers them
	// after this one, taken whole. They carry no plan: a node applies a plan only through the
	// engine's placement, which takes this configuration alone, and a plan for a pod placed
	// through DRA is not built yet. None for a fallback.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	Alternatives []Alternative `json:"alternatives,omitempty"`
}

// Alternative is another configuration within T of a recommendation: LLC ways and the bytes of
// each tier at the size the recommendation was priced for.
type Alternative struct {
	// LLCWays is the configuration's run of last-level cache ways.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
	// SlowRatio is the share of the memory in the slow tier, 0..1.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	SlowRatio float64 `json:"slow_ratio"`
	// DRAMBytes is the configuration's DRAM at the size the recommendation was priced for.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// SlowBytes is the configuration's slow memory at that size.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
}

// Condition types of a TieredRecommendation's status.
const (
	// ConditionPublished is True once the publisher wrote the spec for the generation it names.
	ConditionPublished = "Published"
	// ConditionFallback is True when the spec is a fallback; its reason says why.
	ConditionFallback = "Fallback"
)

// TieredRecommendationStatus is what the publisher says about the object it wrote.
type TieredRecommendationStatus struct {
	// ObservedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// DRAM is the recommended DRAM as a Kubernetes quantity, for people ("3.5Gi", "32Mi"); "-"
	// for a fallback, whose pods get their own memory request. Each pod is given its own request
	// split in the same ratio.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	DRAM string `json:"dram,omitempty"`
	// Slow is the recommended slow memory as a Kubernetes quantity, for people.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Slow string `json:"slow,omitempty"`
	// Conditions are Published (the spec is written for the generation observed) and Fallback
	// (the spec is a fallback; its reason says why).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Plans are the per-structure plans of the latest generations the publisher wrote, newest
	// first, the current one included: a pod placed from a generation the spec has since moved
	// past names it (a placement's plan_from), and its node reads the plan here.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	Plans []GenerationPlan `json:"plans,omitempty"`
}

// GenerationPlan is the plan of one generation of a TieredRecommendation's spec, with the sizes
// it was written for.
type GenerationPlan struct {
	// Generation is the spec's metadata.generation.
	// +kubebuilder:validation:Minimum=1
	Generation int64 `json:"generation"`
	// DRAMBytes is that spec's dram_bytes.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// SlowBytes is that spec's slow_bytes.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
	// Plan is that spec's plan.
	// +kubebuilder:validation:MaxItems=4096
	Plan []StructurePlan `json:"plan"`
}

// TieredRecommendation is the configuration tmc recommends for one (workload, objective),
// published before the workload's pods are scheduled and read by the scheduler from an informer.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=tr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workload`
// +kubebuilder:printcolumn:name="Objective",type=string,JSONPath=`.spec.objective`
// +kubebuilder:printcolumn:name="DRAM",type=string,JSONPath=`.status.dram`
// +kubebuilder:printcolumn:name="Slow",type=string,JSONPath=`.status.slow`
// +kubebuilder:printcolumn:name="Ways",type=integer,JSONPath=`.spec.llc_ways`
// +kubebuilder:printcolumn:name="Fallback",type=string,JSONPath=`.status.conditions[?(@.type=="Fallback")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Fallback")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TieredRecommendation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the recommended configuration, written by the publisher (or pinned by an operator).
	// +kubebuilder:validation:XValidation:rule="has(self.workload) && has(self.objective)",message="a published recommendation names its workload and objective"
	Spec Recommendation `json:"spec"`
	// Status is what the publisher says about the spec it wrote.
	// +optional
	Status TieredRecommendationStatus `json:"status,omitempty"`
}

// TieredRecommendationList is a list of TieredRecommendation.
//
// +kubebuilder:object:root=true
type TieredRecommendationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the recommendations.
	Items []TieredRecommendation `json:"items"`
}

// PlacedConfiguration is the configuration a pod was given.
type PlacedConfiguration struct {
	// VCPUs are the CPUs the pod was given: its CPU request.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	VCPUs int64 `json:"vcpus"`
	// DRAMBytes is the DRAM reserved for the pod.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// SlowBytes is the slow memory reserved for the pod (node-local, or from the rack pool when
	// slow_from_pool).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
	// SlowRatio is the share of the pod's memory in the slow tier, 0..1.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	SlowRatio PyFloat `json:"slow_ratio"`
	// LLCWays is the number of last-level cache ways the pod was given.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
}

// FallbackReason is why a pod got the fallback, as a code: the text beside it is for people
// and may change, the code does not.
type FallbackReason string

// The engine's fallback reasons. A reader meets other codes from newer engines: it counts them
// apart, as unknown, and refuses no placement for one.
const (
	// FallbackUnpublished: the pod names a workload, no recommendation is published for it
	// and its objective, and the pod pins none.
	FallbackUnpublished FallbackReason = "Unpublished"
	// FallbackNoConfiguration: the published recommendation is itself a fallback (tmc has no
	// configuration for the workload).
	FallbackNoConfiguration FallbackReason = "NoConfiguration"
	// FallbackNoWorkload: the pod names no workload and pins no recommendation.
	FallbackNoWorkload FallbackReason = "NoWorkload"
	// FallbackMismatched: the pinned recommendation is for another workload or objective.
	FallbackMismatched FallbackReason = "Mismatched"
	// FallbackAnnotationsTooLarge: the pod's own annotations leave no room for its placement.
	FallbackAnnotationsTooLarge FallbackReason = "AnnotationsTooLarge"
	// FallbackUnreadable: the recommendation the pod pins, or the published one, is not valid.
	FallbackUnreadable FallbackReason = "Unreadable"
	// FallbackPlacementTooLarge: the recommendation's placement would pass tmc's bound on a
	// placement's annotations (its per-structure plan is too long).
	FallbackPlacementTooLarge FallbackReason = "PlacementTooLarge"
)

// FallbackReasons are the engine's codes, in the order the engine checks for them.
var FallbackReasons = []FallbackReason{
	FallbackUnpublished, FallbackNoConfiguration, FallbackNoWorkload, FallbackMismatched,
	FallbackAnnotationsTooLarge, FallbackUnreadable, FallbackPlacementTooLarge,
}

// SizedFrom says whose size a placement's memory is.
type SizedFrom string

const (
	// SizedFromRequest: the pod's own memory request, split by the recommendation (the
	// engine's SizeToPod); a placement without sized_from is this.
	SizedFromRequest SizedFrom = "request"
	// SizedFromRecommendation: the recommendation's own bytes (the footprint it was made for),
	// which the engine reserves for a pod that requests no memory.
	SizedFromRecommendation SizedFrom = "recommendation"
)

// Placement is what the scheduler gave a pod: the tmc.dev/placement annotation, written by the
// Binding. The field order is the annotation's, as every writer writes it.
type Placement struct {
	// Schema is the placement's wire version; tmc.placement/v2 when absent; tmc.placement/v3
	// when the plan is read from the published recommendation (plan_from).
	// +optional
	// +kubebuilder:validation:Enum=tmc.placement/v1;tmc.placement/v2;tmc.placement/v3
	Schema string `json:"schema"`
	// Node is the node the pod was placed on; the node refuses a placement for another.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Workload is the pod's workload; null for a pod that names none.
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=253
	Workload *string `json:"workload"`
	// Objective is what the configuration was chosen for; cheapest when absent.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Objective string `json:"objective"`
	// Configuration is what the pod was given.
	Configuration PlacedConfiguration `json:"configuration"`
	// LLCMask is the CAT mask in hex ("0xf0"): a contiguous run of configuration.llc_ways ways.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{1,16}$`
	LLCMask string `json:"llc_mask"`
	// SlowFromPool says the slow memory comes from the node's rack pool, not the node's own.
	// +optional
	SlowFromPool bool `json:"slow_from_pool"`
	// RecommendationID is the decision's id in the service's log; null for a fallback.
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=64
	RecommendationID *string `json:"recommendation_id"`
	// Fallback says why the pod got the fallback; null when it got a recommendation.
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=512
	Fallback *string `json:"fallback"`
	// FallbackReason names the fallback's cause as one CamelCase word (FallbackReasons lists
	// the engine's), for programs that count fallbacks; absent when it got a recommendation, and
	// in placements written before the field existed.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z]{0,63}$`
	FallbackReason FallbackReason `json:"fallback_reason,omitempty"`
	// Plan is how much of each tagged structure goes to each tier, for the allocator shim;
	// empty when PlanFrom names where the node reads it.
	// +optional
	// +kubebuilder:validation:MaxItems=4096
	Plan []StructurePlan `json:"plan"`
	// PlanFrom names the published recommendation, at the generation the scheduler placed the
	// pod from, whose plan the node sizes to the configuration (SizePlan): every later event of
	// the pod then carries a reference, not the plan. Only in tmc.placement/v3.
	// +optional
	PlanFrom *PlanSource `json:"plan_from,omitempty"`
	// SizedFrom says whose size the configuration's bytes are: the pod's memory request
	// (request, also when absent, as in placements written before the field existed) or the
	// recommendation's own, which the engine reserves for a pod that requests no memory
	// (recommendation). The node holds a container without a limit of its own to the
	// placement's bytes only when they are its pod's request: bytes the pod never asked for may
	// be less than it uses, and the node cannot tell otherwise (the runtime gives it a
	// container's limit, never its pod's request). The engine writes it only as recommendation,
	// so that a node reading placements of pods with a memory request sees no new field.
	// +optional
	// +kubebuilder:validation:Enum=request;recommendation
	SizedFrom *SizedFrom `json:"sized_from,omitempty"`
}

// SizedFromRequest says whether the placement's bytes are its pod's own memory request (a
// placement that does not say is).
func (p *Placement) SizedFromRequest() bool {
	return p.SizedFrom == nil || *p.SizedFrom == SizedFromRequest
}

// PlanSource is where a placement's per-structure plan is published.
type PlanSource struct {
	// Recommendation is the TieredRecommendation's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Recommendation string `json:"recommendation"`
	// Generation is the object's metadata.generation the pod was placed from: the node applies
	// that generation's plan (the spec's, or one the status keeps), never a later one.
	// +kubebuilder:validation:Minimum=1
	Generation int64 `json:"generation"`
	// UID is the object's metadata.uid: an object deleted and made again under the same name
	// starts its generations over at 1, and only its uid tells the two apart (the node applies no
	// plan of an object whose uid differs). Absent from v3 placements written before the field
	// existed: the node matches those by name and generation alone.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]+$`
	UID *string `json:"uid,omitempty"`
}

// LLCMaskBits is the CAT mask as a number (0 when it is not hex).
func (p *Placement) LLCMaskBits() uint64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(p.LLCMask, "0x"), 16, 64)
	return v
}

// NodeCapacity is a node's tiered capacity as its agent publishes it (labels and annotations of
// the Node). Pooled slow memory is accounted on the pool (SlowPool, SlowPoolBytes), never in
// SlowBytes, which is node-local only.
type NodeCapacity struct {
	// HostKind is the node's host kind (the tmc.dev/host-kind label): profiles are used only on
	// the kind they were taken on.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	HostKind string `json:"host_kind,omitempty"`
	// CPUs is 0 when the node does not publish them: its allocatable CPUs count then.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	CPUs int64 `json:"cpus,omitempty"`
	// DRAMBytes is the node's DRAM that tmc places.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// SlowBytes is the node's own slow memory (never a rack pool's).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes,omitempty"`
	// LLCWays is the number of last-level cache ways CAT can give out on the node.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
	// SlowPool names the rack pool the node's pooled slow memory comes from; empty for none.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	SlowPool string `json:"slow_pool,omitempty"`
	// SlowPoolBytes is the rack pool's size; nil when the node does not publish it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowPoolBytes *int64 `json:"slow_pool_bytes,omitempty"`
}

// PatternSlot is the VMs of one workload in one configuration on a planned machine.
type PatternSlot struct {
	// Workload is the slot's workload.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Workload string `json:"workload"`
	// DRAMBytes is each VM's DRAM in the slot's configuration.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// SlowBytes is each VM's slow memory in the slot's configuration.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
	// LLCWays is each VM's LLC ways in the slot's configuration.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
	// Count is how many VMs of the slot the machine holds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	Count int `json:"count"`
}

// NodePattern is the tmc.dev/pattern annotation: which machine of which capacity plan a node
// stands for, and that machine's slots.
type NodePattern struct {
	// Schema is the pattern's wire version, tmc.pattern/v1.
	// +optional
	// +kubebuilder:validation:Enum=tmc.pattern/v1
	Schema string `json:"schema"`
	// Plan names the capacity plan the machine is from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._:-]+$`
	Plan string `json:"plan"`
	// Machine is the machine's index in the plan.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=99999
	Machine int `json:"machine"`
	// Slots are the machine's VMs, by workload and configuration.
	// +kubebuilder:validation:MaxItems=64
	Slots []PatternSlot `json:"slots"`
}

// PyFloat is a float written as Python's json module writes one (repr: 0.0, 0.25, 1e-05), so that
// an annotation reads the same whichever side wrote it.
type PyFloat float64

// MarshalJSON writes the shortest representation that reads back exactly, as repr does.
func (f PyFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("tmc: %v is not a JSON number", v)
	}
	text := strconv.FormatFloat(v, 'g', -1, 64)
	if strings.IndexByte(text, 'e') >= 0 {
		// Go writes e+16 / e-05 as Python does; a mantissa without a point ("1e-05") too.
		return []byte(text), nil
	}
	if !strings.Contains(text, ".") {
		text += ".0"
	}
	return []byte(text), nil
}
