package tmc

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// unlabelledLabels are labels that do not make a pod tiered: none, another value, another key.
var unlabelledLabels = map[string]map[string]string{
	"no label":      nil,
	"another value": {v1alpha1.TieredPodLabel: "yes"},
	"another key":   {"app": "kv"},
}

// A pod that requests tmc's resource without the tiered pod label is refused for good by the
// plugin (no node will take it: its placement would be unguarded), with a message that says
// what to do; PreEnqueue does not keep it waiting even when its pair is unpublished.
func TestAnUnlabelledOptedInPodIsRefusedByThePlugin(t *testing.T) {
	h := newHarness(t, tmcNode("n", 8, 32<<30, 0, 8, "", 0))
	ctx := context.Background()
	for name, labels := range unlabelledLabels {
		pod := tieredPod("unlabelled", nil, "1", "1Gi")
		pod.Labels = labels
		_, st := h.plugin.PreFilter(ctx, framework.NewCycleState(), pod, nil)
		if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != UnlabelledMessage {
			t.Fatalf("%s: %v", name, st)
		}
	}
	for _, want := range []string{"requests tmc.dev/tiered", "not labelled tmc.dev/tiered=true", "label the pod or its template"} {
		if !strings.Contains(UnlabelledMessage, want) {
			t.Errorf("the message %q does not say %q", UnlabelledMessage, want)
		}
	}
	if _, st := h.plugin.PreFilter(ctx, framework.NewCycleState(), tieredPod("labelled", nil, "1", "1Gi"), nil); !st.IsSuccess() {
		t.Fatalf("a labelled pod: %v", st)
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, _, _, recorder, _ := waitingPlugin(WaitUntilPublished, &now)
	waiting := tieredPod("w", map[string]string{WorkloadAnnotation: "graph500"}, "1", "1Gi")
	waiting.Labels = nil
	if st := p.PreEnqueue(ctx, waiting); !st.IsSuccess() {
		t.Fatalf("an unlabelled pod of an unpublished pair is kept waiting: %v", st)
	}
	if _, st := p.PreFilter(ctx, framework.NewCycleState(), waiting, nil); st.Message() != UnlabelledMessage {
		t.Fatalf("an unlabelled pod of an unpublished pair: %v", st)
	}
	if got := recorded(recorder); len(got) != 0 {
		t.Errorf("events for an unlabelled pod: %q", got)
	}
}

// The extender's filter refuses an unlabelled opted-in pod on every node, for good; its bind,
// which reads the pod from the API server, refuses it too and touches nothing, even after a
// filter was sent a labelled copy.
func TestAnUnlabelledOptedInPodIsRefusedByTheExtender(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	pod := tieredPod("unlabelled", nil, "1", "1Gi")
	pod.Labels = nil
	stored := h.create(pod)
	names := []string{"a", "b"}
	out := h.ext.Filter(&extenderv1.ExtenderArgs{Pod: stored, NodeNames: &names})
	if out.Error != "" || out.NodeNames == nil || len(*out.NodeNames) != 0 || len(out.FailedNodes) != 0 ||
		out.FailedAndUnresolvableNodes["a"] != UnlabelledMessage || out.FailedAndUnresolvableNodes["b"] != UnlabelledMessage {
		t.Fatalf("filter: %+v", out)
	}
	forged := stored.DeepCopy()
	forged.Labels = tieredLabels()
	if out := h.ext.Filter(&extenderv1.ExtenderArgs{Pod: forged, NodeNames: &names}); out.Error != "" || len(*out.NodeNames) != 2 {
		t.Fatalf("filter of a labelled copy: %+v", out)
	}
	if e := h.bind(stored, "a"); e != UnlabelledMessage {
		t.Fatalf("bind of an unlabelled pod: %q", e)
	}
	if got := h.get("unlabelled"); got.Spec.NodeName != "" || len(got.Annotations) != 0 || h.engine.cache.Len() != 0 {
		t.Fatalf("the pod was touched: %q %v; %d reservations", got.Spec.NodeName, got.Annotations, h.engine.cache.Len())
	}
	labelled := h.create(tieredPod("labelled", nil, "1", "1Gi"))
	if e := h.bind(labelled, "a"); e != "" {
		t.Fatalf("bind of a labelled pod: %q", e)
	}
}

// A bound pod's placement counts only while the pod carries the tiered pod label: without it no
// policy checked who wrote the placement. The informers' update events add and remove the count
// as the label comes and goes.
func TestPlacementsOfUnlabelledPodsAreNotCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := tmcNode("b", 8, 32<<30, 0, 8, "", 0)
	placed := func(name, mask string, labels map[string]string) *v1.Pod {
		pod := placedOnB(t, tieredPod(name, nil, "1", "1Gi"), mask)
		pod.UID, pod.Labels = types.UID("uid-"+name), labels
		return pod
	}
	p, client := watched(ctx, t, node,
		placed("mine", "0x3", tieredLabels()), placed("forged", "0xc", nil),
		placed("other-value", "0x30", map[string]string{v1alpha1.TieredPodLabel: "True"}))
	capacity, _ := ParseNodeCapacity(node.Labels, node.Annotations)
	eventually := func(what string, mask uint64, cpus int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			u := p.cache.Usage("b", capacity, 8)
			if u.UsedMask == mask && u.UsedCPUs == cpus {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: used mask %#x and %d CPUs, want %#x and %d", what, u.UsedMask, u.UsedCPUs, mask, cpus)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	eventually("only the labelled pod's placement", 0x3, 1)

	pods := client.CoreV1().Pods("default")
	relabel := func(name string, labels map[string]string) {
		t.Helper()
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Labels = labels
		if _, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("forged", tieredLabels())
	eventually("a pod labelled since", 0xf, 2)
	relabel("mine", map[string]string{"app": "kv"})
	eventually("a pod whose label went", 0xc, 1)
}

// A pending pod refused for want of the label is tried again when its labels change.
func TestPodHintQueuesAPodWhoseLabelsChange(t *testing.T) {
	pod := tieredPod("p", nil, "1", "1Gi")
	pod.Labels = nil
	labelled := pod.DeepCopy()
	labelled.Labels = tieredLabels()
	if got, err := PodHint(klog.Background(), pod, pod, labelled); err != nil || got != fwk.Queue {
		t.Fatalf("its own label added: %v %v", got, err)
	}
}
