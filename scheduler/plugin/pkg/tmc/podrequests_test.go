package tmc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podRequestsTable is scheduler/conformance/pod_requests.json: what a pod asks, as Kubernetes'
// scheduler counts it; the publisher reads the same cases (tests/scheduler/test_pod_requests.py).
type podRequestsTable struct {
	Description   string `json:"description"`
	OptInResource string `json:"opt_in_resource"`
	Cases         []struct {
		Name        string     `json:"name"`
		Spec        v1.PodSpec `json:"spec"`
		OptedIn     bool       `json:"opted_in"`
		MemoryBytes int64      `json:"memory_bytes"`
		VCPUs       int64      `json:"vcpus"`
	} `json:"cases"`
}

func TestThePodsAskIsReadAsThePublisherReadsIt(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "pod_requests.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table podRequestsTable
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if table.OptInResource != OptInResource || len(table.Cases) == 0 {
		t.Fatalf("the table's opt-in resource %q, %d cases", table.OptInResource, len(table.Cases))
	}
	for _, c := range table.Cases {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "t", UID: "u"}, Spec: c.Spec}
		ask, err := ReadPod(pod)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if ask.OptedIn != c.OptedIn {
			t.Errorf("%s: opted in %v, the table says %v", c.Name, ask.OptedIn, c.OptedIn)
		}
		// A pod that does not opt in is not read further by the engine.
		if c.OptedIn && (ask.MemoryBytes != c.MemoryBytes || ask.VCPUs != c.VCPUs) {
			t.Errorf("%s: %d bytes and %d vCPUs, the table says %d and %d",
				c.Name, ask.MemoryBytes, ask.VCPUs, c.MemoryBytes, c.VCPUs)
		}
	}
}
