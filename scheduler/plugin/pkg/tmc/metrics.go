package tmc

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics/legacyregistry"
)

// placementMetrics counts the engine's binds, whichever front door asked for them: the plugin's
// series appear on tmc-scheduler's own /metrics (kube-scheduler's registry), the extender's on
// its /metrics beside its verbs. One engine runs per process, so one set of series does.
type placementMetrics struct {
	binds       *prometheus.CounterVec
	bindSeconds prometheus.Histogram
}

var placement = &placementMetrics{
	binds: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tmc_placement_binds_total",
		Help: "Binds by outcome (bound, fenced: this replica no longer holds the placement lease, " +
			"error) and placement (recommended, or the fallback)",
	}, []string{"outcome", "placement"}),
	bindSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tmc_placement_bind_seconds",
		Help:    "A bind's time, from its reservation to the Binding's answer",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5},
	}),
}

func (m *placementMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.binds, m.bindSeconds}
}

var (
	registerWithScheduler sync.Once
	registered            error
)

// registerPlacementMetrics adds the engine's series to kube-scheduler's registry, once per
// process however many profiles build the plugin. A name another component registered first is
// an error for New to return, not a panic.
func registerPlacementMetrics() error {
	registerWithScheduler.Do(func() { registered = registerAll(legacyregistry.Registerer(), placement.collectors()) })
	return registered
}

func registerAll(reg prometheus.Registerer, collectors []prometheus.Collector) error {
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%s: registering its metrics: %w", Name, err)
		}
	}
	return nil
}

// observeBind counts one bind of the engine.
func (m *placementMetrics) observeBind(ask *PodAsk, err error, started time.Time) {
	kind := "recommended"
	if ask != nil && ask.Fallback != nil {
		kind = "fallback"
	}
	outcome := "bound"
	switch {
	case errors.Is(err, ErrLeaseLost):
		outcome = "fenced"
	case err != nil:
		outcome = "error"
	}
	m.binds.WithLabelValues(outcome, kind).Inc()
	m.bindSeconds.Observe(time.Since(started).Seconds())
}
