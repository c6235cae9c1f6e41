package tmcnri

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// The report a node writes, as the publisher's relay is tested against it
// (scheduler/conformance/node-report.json): a change to what tmc-nri writes fails here until the
// table, and with it the relay's test, says the same.
var nodeReportPath = filepath.Join("..", "..", "..", "..", "scheduler", "conformance", "node-report.json")

func TestANodeReportIsWhatTheRelayIsTestedAgainst(t *testing.T) {
	raw, err := os.ReadFile(nodeReportPath)
	must(t, err)
	var table struct {
		Schema string `json:"schema"`
		About  string `json:"about"`
		Input  struct {
			Node         string `json:"node"`
			PodNamespace string `json:"pod_namespace"`
			PodName      string `json:"pod_name"`
			PodUID       string `json:"pod_uid"`
			Warning      bool   `json:"warning"`
			Reason       string `json:"reason"`
			Message      string `json:"message"`
			At           string `json:"at"`
		} `json:"input"`
		Event map[string]any `json:"event"`
	}
	must(t, json.Unmarshal(raw, &table))
	if table.Schema != "tmc.node-report/v1" {
		t.Fatalf("%s: schema %q", nodeReportPath, table.Schema)
	}
	in := table.Input
	at, err := time.Parse(time.RFC3339, in.At)
	must(t, err)
	pod := &api.PodSandbox{Namespace: in.PodNamespace, Name: in.PodName, Uid: in.PodUID}
	written, err := json.Marshal(NodeReport(in.Node, pod, in.Warning, in.Reason, in.Message, at))
	must(t, err)
	var got map[string]any
	must(t, json.Unmarshal(written, &got))
	if !reflect.DeepEqual(got, table.Event) {
		pretty, _ := json.MarshalIndent(got, "", "  ")
		t.Fatalf("tmc-nri writes\n%s\nthe table says\n%v", pretty, table.Event)
	}
}
