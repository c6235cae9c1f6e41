package tmc

import (
	"fmt"
	"math"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// RecommendationAnnotation carries the configuration tmc recommends for the pod, written on the
// pod before it is scheduled, so that placing it needs no call to the service. Its JSON:
//
//	{"schema": "tmc.recommendation/v1", "workload": "graph500", "objective": "slo:5%",
//	 "recommendation_id": "...", "dram_bytes": N, "slow_bytes": N, "llc_ways": N,
//	 "slow_ratio": 0.25, "plan": [{"tag": "...", "fast_bytes": N, "slow_bytes": N}]}
//
// workload and objective name what it was computed for: when they are given and differ from the
// pod's own annotations (a template edited after the fact), the recommendation is not trusted and
// the pod gets the fallback. vCPUs are the pod's CPU request, as in the extender.
//
// A recommendation is the program's shape (a slow ratio, LLC ways, each structure's share of each
// tier), profiled on a small input; the pod's own memory request is its size. The placement gives
// the pod its request split by the ratio and the plan's shares (SizeToPod), so nothing ever holds a
// container below what its pod asked for. The recommendation's bytes are used only for a pod that
// requests no memory: it is reserved them, its placement says so (sized_from), and the node
// then limits none of its containers to them.
const (
	RecommendationAnnotation = Group + "/recommendation"
	RecommendationSchema     = v1alpha1.RecommendationSchema
	RecommendationKind       = v1alpha1.RecommendationKind
	defaultObjective         = "cheapest"
)

// PodAsk is what the plugin reads off a pod: whether it opted in, what it is, and the
// configuration it is to be given (a recommendation, or the fallback with its reason).
type PodAsk struct {
	OptedIn   bool
	Workload  *string
	Objective string
	VCPUs     int64
	// MemoryBytes is the pod's memory request: the fallback's DRAM, and the size a
	// recommendation is split to.
	MemoryBytes int64
	// ProfileBytes is the footprint the recommendation was made for (its DRAM and slow bytes),
	// kept to say when the pod asks for less than its profile traced; 0 for the fallback.
	ProfileBytes int64

	DRAMBytes        int64
	SlowBytes        int64
	SlowRatio        float64
	LLCWays          int // 0 for the fallback: every way of the longest free run
	RecommendationID *string
	Fallback         *string
	FallbackReason   FallbackReason // the fallback's cause as a code
	Plan             []StructurePlan
	// PlanFrom is the published recommendation the plan is read from on the node, in place of
	// Plan (nil for a pinned recommendation, whose plan the placement carries).
	PlanFrom *v1alpha1.PlanSource
	// Unpublished: the pod names a workload, but no recommendation for it and its objective is
	// published yet (and the pod pins none). The plugin may wait a little for the publisher.
	Unpublished bool
}

// NeedWays is the ways a node must have free in one run: the fallback asks for at least one.
func (a *PodAsk) NeedWays() int {
	if a.LLCWays < 1 {
		return 1
	}
	return a.LLCWays
}

// Ask is the configuration as the fit and the packing score see it.
func (a *PodAsk) Ask() Ask {
	return Ask{VCPUs: float64(a.VCPUs), DRAMBytes: float64(a.DRAMBytes), SlowBytes: float64(a.SlowBytes), LLCWays: a.NeedWays()}
}

// podRequest is what the pod asks of one resource as the in-tree resource fit counts it
// (component-helpers' PodRequests): the containers' sum, or an init container's when larger,
// restartable init (sidecar) containers counted with the containers, pod-level requests and the
// pod's overhead included.
func podRequest(pod *v1.Pod, name v1.ResourceName) resource.Quantity {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[name]
}

// ReadPod reads the pod's ask from the pod alone (its tmc.dev/recommendation annotation).
func ReadPod(pod *v1.Pod) (*PodAsk, error) { return ReadPodWith(pod, nil) }

// ReadPodWith reads the pod's ask. Its configuration is the recommendation pinned on the pod
// (tmc.dev/recommendation), else the one published for its workload and objective, else the
// fallback. A pod that does not request OptInResource is not tmc's (OptedIn false, no error). An
// unreadable or mismatched recommendation is not an error: the pod gets the fallback, and its
// placement says why.
func ReadPodWith(pod *v1.Pod, published Published) (*PodAsk, error) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if optIn := requests[OptInResource]; optIn.Sign() <= 0 {
		return &PodAsk{}, nil
	}
	cpu, memory := requests[v1.ResourceCPU], requests[v1.ResourceMemory]
	if cpu.Cmp(*resource.NewQuantity(MaxCPUs, resource.DecimalSI)) > 0 || memory.Cmp(*resource.NewQuantity(MaxBytes, resource.BinarySI)) >= 0 {
		return nil, fmt.Errorf("the pod asks for more than a node can hold (%s CPUs, %s bytes)", cpu.String(), memory.String())
	}
	ask := &PodAsk{OptedIn: true, Objective: defaultObjective}
	ann := pod.Annotations
	if w := ann[WorkloadAnnotation]; w != "" {
		ask.Workload = &w
	}
	if o := ann[ObjectiveAnnotation]; o != "" {
		ask.Objective, _ = CanonicalObjective(o)
	}
	// Whole vCPUs are a configuration's unit: the request rounded up, at least one.
	ask.VCPUs = max(1, (cpu.MilliValue()+999)/1000)
	// Bytes truncated, as the extender reads them.
	ask.MemoryBytes = memory.MilliValue() / 1000

	raw, source := ann[RecommendationAnnotation], "the pod's "+RecommendationAnnotation
	var from v1alpha1.PlanSource
	if raw == "" && published != nil && ask.Workload != nil {
		if spec, object, ok := published.LookupFrom(*ask.Workload, ask.Objective); ok {
			raw, source, from = string(spec), "the published "+RecommendationKind, object
		}
	}
	rec, profile, why := readRecommendationOnce(raw, source, ask)
	if rec == nil && raw == "" && ask.Workload != nil {
		ask.Unpublished = true
		why.code, why.text = v1alpha1.FallbackUnpublished, fmt.Sprintf("no recommendation is published for workload %q and objective %q (%s) and the pod pins none (%s)",
			clip(*ask.Workload, 253), clip(ask.Objective, 64), RecommendationKind, RecommendationAnnotation)
	}
	if rec != nil && rec.Fallback != nil {
		rec, why = nil, fallbackCause{v1alpha1.FallbackNoConfiguration, clip("tmc has no configuration for the workload: "+*rec.Fallback, 512)}
	}
	if rec != nil && annotationsSize(ann) > maxPodAnnotationsAfterBind-MaxPlacementAnnotationsBytes {
		rec, why = nil, fallbackCause{v1alpha1.FallbackAnnotationsTooLarge, fmt.Sprintf("the pod's own annotations take %d bytes: with its placement they would pass tmc's bound of %d",
			annotationsSize(ann), maxPodAnnotationsAfterBind)}
	}
	if rec == nil {
		ask.DRAMBytes, ask.SlowBytes, ask.SlowRatio, ask.LLCWays = ask.MemoryBytes, 0, 0, 0
		ask.Fallback, ask.FallbackReason = &why.text, why.code
		return ask, nil
	}
	// rec is already at the pod's size (readRecommendation sizes it).
	ask.DRAMBytes, ask.SlowBytes, ask.SlowRatio, ask.LLCWays = rec.DRAMBytes, rec.SlowBytes, rec.SlowRatio, rec.LLCWays
	ask.RecommendationID, ask.Plan, ask.ProfileBytes = rec.RecommendationID, rec.Plan, profile
	if len(rec.Plan) > 0 && from.Generation > 0 {
		// The node reads a published plan where it is published (and sizes it as SizeToPod
		// did): the pod carries the object's name, generation and uid, not the plan.
		ask.PlanFrom, ask.Plan = &from, nil
	}
	return ask, nil
}

// BelowProfile says whether the pod asks for less memory than its recommendation's profile
// traced: it is given what it asked for, split by the recommendation, and told so.
func (a *PodAsk) BelowProfile() bool {
	return a.Fallback == nil && a.MemoryBytes > 0 && a.MemoryBytes < a.ProfileBytes
}

// SizedFromRecommendation says whether the pod is placed at its recommendation's own bytes, not
// at its request: a recommendation for a pod that requests no memory. It is still reserved those
// bytes (a node must have room for what its program was seen to use), but its placement says
// whose size they are, so that the node sets no memory limit from bytes the pod never asked for
// (the node sees a container's limit, never its pod's request), and the pod is told.
func (a *PodAsk) SizedFromRecommendation() bool {
	return a.Fallback == nil && a.MemoryBytes <= 0
}

// SizeToPod is the recommendation at the pod's size: memoryBytes (the pod's request) split by the
// slow ratio as model.resources.split_memory splits a footprint (DRAM rounded half to even, slow
// the rest), and each structure's bytes in a tier scaled by that tier's new size, rounded down,
// so that the plan never places more in a tier than the configuration holds. A pod that requests
// no memory gets the recommendation's own bytes.
func SizeToPod(rec *Recommendation, memoryBytes int64) (dram, slow int64, plan []StructurePlan) {
	profile := rec.DRAMBytes + rec.SlowBytes
	if memoryBytes <= 0 || memoryBytes == profile {
		return rec.DRAMBytes, rec.SlowBytes, rec.Plan
	}
	// Bytes are below 2^52 (checked on the recommendation and the pod), so the float product is
	// exact to the byte before rounding.
	dram = int64(math.RoundToEven((1 - rec.SlowRatio) * float64(memoryBytes)))
	dram = min(max(dram, 0), memoryBytes)
	slow = memoryBytes - dram
	return dram, slow, v1alpha1.SizePlan(rec.Plan, rec.DRAMBytes, rec.SlowBytes, dram, slow)
}

// readMemo keeps what readRecommendation answered for the texts it read: every pod of a workload
// and objective reads the same published text (in PreFilter, and in each of the extender's
// filter, prioritize and bind), and reading it (JSON, the bounds, the placement it would make)
// cost a tenth of tmc-extender's CPU in a burst. An answer depends only on the key's fields.
// Answers are shared between pods and never changed.
var readMemo = struct {
	sync.Mutex
	answers map[readKey]readAnswer
}{answers: map[readKey]readAnswer{}}

// readMemoEntries bounds the answers kept: far more than the (workload, objective, vCPUs)
// triples of the pods in flight; past it, the memo starts again.
const readMemoEntries = 4096

type readKey struct {
	raw, source, objective, workload string
	named                            bool // the pod names a workload
	vcpus, memory                    int64
}

type readAnswer struct {
	rec     *Recommendation
	profile int64
	why     fallbackCause
}

// fallbackCause is why a pod gets the fallback: the text people read and the code programs
// count by (no code and no text: it does not).
type fallbackCause struct {
	code FallbackReason
	text string
}

// readRecommendationOnce is readRecommendation, remembered for the same text, source and pod
// fields it reads (the workload, the objective, the vCPUs and the memory request).
func readRecommendationOnce(raw, source string, ask *PodAsk) (*Recommendation, int64, fallbackCause) {
	if raw == "" {
		return readRecommendation(raw, source, ask)
	}
	key := readKey{raw: raw, source: source, objective: ask.Objective, vcpus: ask.VCPUs, memory: ask.MemoryBytes}
	if ask.Workload != nil {
		key.workload, key.named = *ask.Workload, true
	}
	readMemo.Lock()
	found, ok := readMemo.answers[key]
	readMemo.Unlock()
	if ok {
		return found.rec, found.profile, found.why
	}
	rec, profile, why := readRecommendation(raw, source, ask)
	readMemo.Lock()
	if len(readMemo.answers) >= readMemoEntries {
		clear(readMemo.answers)
	}
	readMemo.answers[key] = readAnswer{rec, profile, why}
	readMemo.Unlock()
	return rec, profile, why
}

// readRecommendation returns the recommendation in raw (from source, for messages) sized to the
// pod (SizeToPod) with the footprint it was made for, or nil and the fallback's reason.
func readRecommendation(raw, source string, ask *PodAsk) (*Recommendation, int64, fallbackCause) {
	if raw == "" {
		return nil, 0, fallbackCause{v1alpha1.FallbackNoWorkload, "the pod carries no recommendation (" + RecommendationAnnotation + " annotation)"}
	}
	unreadable := func(why string) (*Recommendation, int64, fallbackCause) {
		return nil, 0, fallbackCause{v1alpha1.FallbackUnreadable, clip(source+" is unreadable: "+why, 512)}
	}
	var rec Recommendation
	if err := v1alpha1.DecodeOne(raw, &rec); err != nil {
		return unreadable(err.Error())
	}
	if rec.Schema != "" && rec.Schema != RecommendationSchema {
		return unreadable(fmt.Sprintf("schema %q is not %s", clip(rec.Schema, 40), RecommendationSchema))
	}
	if rec.Workload != nil && (ask.Workload == nil || *rec.Workload != *ask.Workload) {
		return nil, 0, fallbackCause{v1alpha1.FallbackMismatched, "the recommendation is for another workload than the pod's " + WorkloadAnnotation}
	}
	if rec.Objective != nil && canonical(*rec.Objective) != ask.Objective {
		return nil, 0, fallbackCause{v1alpha1.FallbackMismatched, "the recommendation is for another objective than the pod's " + ObjectiveAnnotation}
	}
	if rec.Fallback != nil {
		if *rec.Fallback == "" || len(*rec.Fallback) > 512 {
			return unreadable("fallback must be 1..512 characters")
		}
		return &rec, 0, fallbackCause{}
	}
	switch {
	case rec.DRAMBytes < 0 || rec.DRAMBytes >= MaxBytes || rec.SlowBytes < 0 || rec.SlowBytes >= MaxBytes ||
		rec.ProfileBytes < 0 || rec.ProfileBytes >= MaxBytes:
		return unreadable("bytes must be in 0..2^52")
	case rec.LLCWays < 1 || rec.LLCWays > MaxLLCWays:
		return unreadable(fmt.Sprintf("llc_ways must be in 1..%d", MaxLLCWays))
	case !(rec.SlowRatio >= 0 && rec.SlowRatio <= 1):
		return unreadable("slow_ratio must be in 0..1")
	case rec.RecommendationID != nil && len(*rec.RecommendationID) > 64:
		return unreadable("recommendation_id is longer than 64 characters")
	}
	// The plan must be one a placement can carry: checked with the placement's own rules.
	probe := Placement{
		Schema: PlacementSchema, Node: "probe", Objective: ask.Objective,
		Configuration: PlacedConfiguration{VCPUs: ask.VCPUs, DRAMBytes: rec.DRAMBytes, SlowBytes: rec.SlowBytes, SlowRatio: PyFloat(rec.SlowRatio), LLCWays: rec.LLCWays},
		LLCMask:       FormatMask(RunMask(0, rec.LLCWays)),
		Plan:          rec.Plan,
	}
	if err := validatePlacement(&probe); err != nil {
		return unreadable(strings.TrimPrefix(err.Error(), PlacementAnnotation+": "))
	}
	// The pod's placement is the recommendation at the pod's size; its plan keeps within the
	// sized tiers by construction, and its annotations are measured as they will be written.
	profile := rec.DRAMBytes + rec.SlowBytes
	sized := rec
	sized.DRAMBytes, sized.SlowBytes, sized.Plan = SizeToPod(&rec, ask.MemoryBytes)
	probe.Configuration.DRAMBytes, probe.Configuration.SlowBytes, probe.Plan = sized.DRAMBytes, sized.SlowBytes, sized.Plan
	// The probe's node is 5 bytes; a real one up to 253. Room is kept for the seal.
	ann, err := PlacementAnnotations(&probe)
	if err != nil {
		return unreadable(err.Error())
	}
	if size := annotationsSize(ann) + 253 + maxSealAnnotationBytes; size > MaxPlacementAnnotationsBytes {
		return nil, 0, fallbackCause{v1alpha1.FallbackPlacementTooLarge, fmt.Sprintf("the placement of %s would take %d bytes of annotations, over tmc's bound of %d (the API server allows 256 KiB for all of a pod's)",
			source, size, MaxPlacementAnnotationsBytes)}
	}
	if rec.ProfileBytes > 0 {
		// The footprint the profile traced, when the recommendation was priced at another size.
		profile = rec.ProfileBytes
	}
	return &sized, profile, fallbackCause{}
}
