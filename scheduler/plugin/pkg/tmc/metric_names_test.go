package tmc

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestListMetricNames writes the name and label names of every metric the extender's registry holds, one JSON
// object a line, to the file TMC_METRIC_NAMES names (tests/deploy/test_metrics_exported.py reads it:
// the Grafana dashboard and the alerts may name only exported series). Read from the registry's
// descriptors, so that a series is listed before anything has observed it.
func TestListMetricNames(t *testing.T) {
	reg := newExtenderMetrics().registry
	descs := make(chan *prometheus.Desc)
	go func() { reg.Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([^"]*)"`)
	variable := regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
	var lines []string
	for d := range descs {
		s := d.String()
		name, labels := fqName.FindStringSubmatch(s), variable.FindStringSubmatch(s)
		if name == nil || labels == nil {
			t.Fatalf("unexpected descriptor %s", s)
		}
		names := []string{}
		if labels[1] != "" {
			names = strings.Split(labels[1], ",")
		}
		line, err := json.Marshal(map[string]any{"name": name[1], "labels": names})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(line))
	}
	if len(lines) == 0 {
		t.Fatal("no metric registered")
	}
	if out := os.Getenv("TMC_METRIC_NAMES"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
