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
	PatternSchema        = "tmc.pattern/v1"
	RecommendationKind   = "TieredRecommendation"
)

// StructurePlan is how much of one tagged structure goes to each tier.
type StructurePlan struct {
	// Tag names the structure as the workload's bundle tags it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/()\[\]<>-]+$`
	Tag string `json:"tag"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	FastBytes int64 `json:"fast_bytes"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
}

// Recommendation is the configuration tmc recommends for a workload and objective, independent
// of any one pod: a TieredRecommendation's spec, or a pod's tmc.dev/recommendation annotation.
// vCPUs are not in it: a pod gets what it requests. Fallback set means tmc has no configuration
// for the pair: its pods get the fallback (all memory in DRAM) with this reason.
type Recommendation struct {
	// +optional
	// +kubebuilder:validation:Enum=tmc.recommendation/v1
	Schema string `json:"schema,omitempty"`
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Workload *string `json:"workload,omitempty"`
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Objective *string `json:"objective,omitempty"`
	// RecommendationID is the decision's id in the service's log.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RecommendationID *string `json:"recommendation_id,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes,omitempty"`
	// LLCWays is 0 only for a fallback.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	SlowRatio float64 `json:"slow_ratio,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=4096
	Plan []StructurePlan `json:"plan,omitempty"`
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Fallback *string `json:"fallback,omitempty"`
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
	// DRAM is the recommended DRAM in GiB, for people ("24.0"); "-" for a fallback, whose
	// pods get their own memory request.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	DRAM string `json:"dramGiB,omitempty"`
	// Slow is the recommended slow memory in GiB, for people.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Slow string `json:"slowGiB,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TieredRecommendation is the configuration tmc recommends for one (workload, objective),
// published before the workload's pods are scheduled and read by the scheduler from an informer.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=tr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workload`
// +kubebuilder:printcolumn:name="Objective",type=string,JSONPath=`.spec.objective`
// +kubebuilder:printcolumn:name="DRAM-GiB",type=string,JSONPath=`.status.dramGiB`
// +kubebuilder:printcolumn:name="Slow-GiB",type=string,JSONPath=`.status.slowGiB`
// +kubebuilder:printcolumn:name="Ways",type=integer,JSONPath=`.spec.llc_ways`
// +kubebuilder:printcolumn:name="Fallback",type=string,JSONPath=`.status.conditions[?(@.type=="Fallback")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Fallback")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TieredRecommendation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="has(self.workload) && has(self.objective)",message="a published recommendation names its workload and objective"
	Spec Recommendation `json:"spec"`
	// +optional
	Status TieredRecommendationStatus `json:"status,omitempty"`
}

// TieredRecommendationList is a list of TieredRecommendation.
//
// +kubebuilder:object:root=true
type TieredRecommendationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TieredRecommendation `json:"items"`
}

// PlacedConfiguration is the configuration a pod was given.
type PlacedConfiguration struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	VCPUs int64 `json:"vcpus"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	SlowRatio PyFloat `json:"slow_ratio"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
}

// Placement is what the scheduler gave a pod: the tmc.dev/placement annotation, written by the
// Binding. The field order is the annotation's, as every writer writes it.
type Placement struct {
	// +optional
	// +kubebuilder:validation:Enum=tmc.placement/v1;tmc.placement/v2
	Schema string `json:"schema"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=253
	Workload *string `json:"workload"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Objective     string              `json:"objective"`
	Configuration PlacedConfiguration `json:"configuration"`
	// LLCMask is the CAT mask in hex ("0xf0"): a contiguous run of configuration.llc_ways ways.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{1,16}$`
	LLCMask string `json:"llc_mask"`
	// +optional
	SlowFromPool bool `json:"slow_from_pool"`
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=64
	RecommendationID *string `json:"recommendation_id"`
	// Fallback says why the pod got the fallback; null when it got a recommendation.
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=512
	Fallback *string `json:"fallback"`
	// +optional
	// +kubebuilder:validation:MaxItems=4096
	Plan []StructurePlan `json:"plan"`
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
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	HostKind string `json:"host_kind,omitempty"`
	// CPUs is 0 when the node does not publish them: its allocatable CPUs count then.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	CPUs int64 `json:"cpus,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
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
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Workload string `json:"workload"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	DRAMBytes int64 `json:"dram_bytes"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4503599627370495
	SlowBytes int64 `json:"slow_bytes"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	LLCWays int `json:"llc_ways"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	Count int `json:"count"`
}

// NodePattern is the tmc.dev/pattern annotation: which machine of which capacity plan a node
// stands for, and that machine's slots.
type NodePattern struct {
	// +optional
	// +kubebuilder:validation:Enum=tmc.pattern/v1
	Schema string `json:"schema"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._:-]+$`
	Plan string `json:"plan"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=99999
	Machine int `json:"machine"`
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
