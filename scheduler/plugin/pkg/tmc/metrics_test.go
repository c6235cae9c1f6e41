package tmc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A bind is counted by what became of it and by the placement it carried, through either door.
func TestBindsAreCountedByOutcomeAndPlacement(t *testing.T) {
	count := func(outcome, kind string) float64 {
		return testutil.ToFloat64(placement.binds.WithLabelValues(outcome, kind))
	}
	reason := "no profile"
	recommended, fallback := &PodAsk{}, &PodAsk{Fallback: &reason}
	before := map[string]float64{
		"bound/recommended": count("bound", "recommended"),
		"bound/fallback":    count("bound", "fallback"),
		"fenced/fallback":   count("fenced", "fallback"),
		"error/recommended": count("error", "recommended"),
	}
	now := time.Now()
	placement.observeBind(recommended, nil, now)
	placement.observeBind(fallback, nil, now)
	placement.observeBind(fallback, fmt.Errorf("tmc: a stale replica: %w", ErrLeaseLost), now)
	placement.observeBind(recommended, errors.New("the API server refused the Binding"), now)
	for key, got := range map[string]float64{
		"bound/recommended": count("bound", "recommended"),
		"bound/fallback":    count("bound", "fallback"),
		"fenced/fallback":   count("fenced", "fallback"),
		"error/recommended": count("error", "recommended"),
	} {
		if got != before[key]+1 {
			t.Errorf("%s: counted %v, want %v", key, got, before[key]+1)
		}
	}
	// The extender exports the same series beside its verbs.
	names, err := newExtenderMetrics().registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, family := range names {
		found = found || family.GetName() == "tmc_placement_binds_total"
	}
	if !found {
		t.Fatal("the extender's /metrics lacks tmc_placement_binds_total")
	}
}

// A registry that already holds one of the engine's names (another plugin's series, say) makes
// registration an error that New returns, never a panic in kube-scheduler's start.
func TestARegisteredNameIsAnErrorNotAPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "tmc_placement_binds_total", Help: "someone else's"}))
	err := registerAll(reg, placement.collectors())
	if err == nil || !strings.Contains(err.Error(), Name) {
		t.Fatalf("registering over a taken name: %v", err)
	}
	if err := registerAll(prometheus.NewRegistry(), placement.collectors()); err != nil {
		t.Fatalf("registering in an empty registry: %v", err)
	}
}
