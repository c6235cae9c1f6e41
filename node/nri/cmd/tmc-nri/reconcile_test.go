package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"tmc.dev/node-nri/internal/tmcnri"
	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// "tmc-nri reconcile --pods FILE" once: the pod's cgroup gets its placement, and the exit status
// says the round ran; flags it does not know stop it before it touches anything.
func TestReconcileOnceFromAPodList(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys")
	node0 := filepath.Join(sys, "devices", "system", "node", "node0")
	write(t, filepath.Join(node0, "cpulist"), "0-1\n")
	write(t, filepath.Join(node0, "meminfo"), "Node 0 MemTotal:       16777216 kB\n")
	write(t, filepath.Join(node0, "distance"), "10\n")
	write(t, filepath.Join(sys, "devices", "system", "node", "online"), "0\n")
	uid := "6f1c2a9e-0100"
	podDir := filepath.Join(dir, "cgroup", "kubepods", "besteffort", "pod"+uid)
	write(t, filepath.Join(podDir, "memory.max"), "max\n")
	write(t, filepath.Join(podDir, "cpuset.mems"), "\n")

	placement := `{"schema":"tmc.placement/v2","node":"node-a","workload":"w","objective":"cheapest",` +
		`"configuration":{"vcpus":1,"dram_bytes":1073741824,"slow_bytes":0,"slow_ratio":0,"llc_ways":1},` +
		`"llc_mask":"0x1","slow_from_pool":false,"recommendation_id":null,"fallback":null}`
	list, err := json.Marshal(corev1.PodList{Items: []corev1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "6f1c2a9e-0100",
			Labels:      map[string]string{v1alpha1.TieredPodLabel: v1alpha1.TieredPodLabelValue},
			Annotations: map[string]string{tmcnri.PlacementAnnotation: placement}},
		Spec:   corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "p"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	pods := filepath.Join(dir, "pods.json")
	write(t, pods, string(list))
	args := []string{"--node", "node-a", "--sys", sys, "--resctrl", "", "--cgroup-root", filepath.Join(dir, "cgroup"),
		"--plan-dir", filepath.Join(dir, "plans"), "--pods", pods}
	if code := reconcile(append(args, "--no-such-flag")); code != 2 {
		t.Fatalf("an unknown flag: exit %d", code)
	}
	if data, _ := os.ReadFile(filepath.Join(podDir, "memory.max")); strings.TrimSpace(string(data)) != "max" {
		t.Fatalf("written before its flags were read: %q", data)
	}
	if code := reconcile(args); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for file, want := range map[string]string{"memory.max": "1073741824", "cpuset.mems": "0"} {
		if data, _ := os.ReadFile(filepath.Join(podDir, file)); strings.TrimSpace(string(data)) != want {
			t.Errorf("%s: %q, want %s", file, data, want)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "plans", uid+".plan")); !strings.Contains(string(data), "fast_node 0") {
		t.Errorf("plan %q", data)
	}
	write(t, pods, "{")
	if code := reconcile(args); code != 1 {
		t.Errorf("an unreadable pod list: exit %d", code)
	}
}
