package tmc

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where nodes enforce placements through tmc-nri, a placed pod is bound asking the runtime to
// refuse its containers unless that plugin processed them; elsewhere nothing is asked.
func TestABindAsksTheNodesRuntimeForItsPlugin(t *testing.T) {
	for _, plugin := range []string{"", "tmc"} {
		h := newHarness(t, tmcNode("n1", 16, 64<<30, 0, 11, "", 0))
		if err := RequireNodePlugin(h.plugin.Engine, plugin); err != nil {
			t.Fatal(err)
		}
		if node, st := h.schedule(tieredPod("a", nil, "1", "1Gi")); !st.IsSuccess() || node != "n1" {
			t.Fatalf("%q %v", node, st)
		}
		got, err := h.client.CoreV1().Pods("default").Get(context.Background(), "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		value, asked := got.Annotations[RequiredPluginsAnnotation]
		if plugin == "" && asked {
			t.Errorf("no node plugin configured, yet the pod asks for %s", value)
		}
		if plugin != "" && value != `["tmc"]` {
			t.Errorf("the pod asks for %q, want [\"tmc\"]", value)
		}
	}
	for _, bad := range []string{"Tmc", "tmc nri", "a\"b", string(make([]byte, 64))} {
		if err := RequireNodePlugin(&Engine{}, bad); err == nil {
			t.Errorf("%q accepted as a plugin name", bad)
		}
	}
}
