package tmc

import (
	"context"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The runtime reads a container's own required-plugins key before the pod's: a tenant's empty
// list for a container, set when it created the pod, would let that container start without
// tmc-nri. The Binding writes every container's key over it.
func TestABindWritesEveryContainersRequiredPlugins(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 64<<30, 0, 11, "", 0))
	if err := RequireNodePlugin(h.plugin.Engine, "tmc"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 54)
	pod := tieredPod("a", map[string]string{
		containerRequiredPluginsPrefix + "c":    "[]",
		containerRequiredPluginsPrefix + "init": "[]",
		// An ephemeral container the tenant will add later, named ahead.
		containerRequiredPluginsPrefix + "debug": "[]",
		RequiredPluginsAnnotation:                "[]",
	}, "1", "1Gi")
	pod.Spec.Containers[0].Name = "c"
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "side"}, v1.Container{Name: long})
	pod.Spec.InitContainers = []v1.Container{{Name: "init"}}
	if node, st := h.schedule(pod); !st.IsSuccess() || node != "n1" {
		t.Fatalf("%q %v", node, st)
	}
	got, err := h.client.CoreV1().Pods("default").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{RequiredPluginsAnnotation, containerRequiredPluginsPrefix + "c",
		containerRequiredPluginsPrefix + "side", containerRequiredPluginsPrefix + "init",
		containerRequiredPluginsPrefix + "debug"} {
		if v := got.Annotations[key]; v != `["tmc"]` {
			t.Errorf("%s is %q after the bind, want [\"tmc\"]", key, v)
		}
	}
	// No valid annotation key names a container this long, so none is written.
	if v, ok := got.Annotations[containerRequiredPluginsPrefix+long]; ok {
		t.Errorf("a key no API server accepts was written: %q", v)
	}
}

// Without a node plugin, no key of NRI's is written, the pod's own left as they are.
func TestABindWithoutANodePluginWritesNoContainerKeys(t *testing.T) {
	h := newHarness(t, tmcNode("n1", 16, 64<<30, 0, 11, "", 0))
	pod := tieredPod("a", map[string]string{containerRequiredPluginsPrefix + "other": `["x"]`}, "1", "1Gi")
	if node, st := h.schedule(pod); !st.IsSuccess() || node != "n1" {
		t.Fatalf("%q %v", node, st)
	}
	got, err := h.client.CoreV1().Pods("default").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range got.Annotations {
		if strings.HasPrefix(k, "required-plugins.noderesource.dev/") && k != containerRequiredPluginsPrefix+"other" {
			t.Errorf("%s=%s written with no node plugin configured", k, v)
		}
	}
}

// The keys count against the Binding's bound: a pod whose containers' keys would pass it is not
// bound, rather than bound without the guard.
func TestRequiredPluginsKeysKeepWithinTheBindingsBound(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "many", Namespace: "default"}}
	for i := 0; i < 3; i++ {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: strings.Repeat("c", 50) + string(rune('a'+i))})
	}
	ann := map[string]string{}
	if err := requirePlugin(ann, pod, "tmc"); err != nil || len(ann) != 4 {
		t.Fatalf("%v %d", err, len(ann))
	}
	for i := 0; len(pod.Spec.Containers) < 1000; i++ {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: strings.Repeat("d", 45) + strings.Repeat("0", 8-len(strconv.Itoa(i))) + strconv.Itoa(i)})
	}
	err := requirePlugin(map[string]string{}, pod, "tmc")
	if err == nil || !strings.Contains(err.Error(), "over tmc's bound") {
		t.Fatalf("1000 containers' keys accepted: %v", err)
	}
}
