package tmcnri

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Metrics counts what the plugin did, for Prometheus.
type Metrics struct {
	containers *prometheus.CounterVec
	unapplied  *prometheus.CounterVec
	handled    prometheus.Histogram
}

// NewMetrics registers the plugin's counters with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		containers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tmc_nri_containers_total",
			Help: "Containers of placed pods by outcome: adjusted, partial, refused, malformed, late, foreign.",
		}, []string{"outcome"}),
		unapplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tmc_nri_unapplied_total",
			Help: "What a placed pod's container did not get (llc-mask, cpuset.mems, plan, shim, record), or refused/late.",
		}, []string{"what"}),
	}
	m.handled = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tmc_nri_create_container_seconds",
		Help:    "Time tmc-nri takes over one CreateContainer, placed pods or not.",
		Buckets: []float64{0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3},
	})
	reg.MustRegister(m.containers, m.unapplied, m.handled)
	return m
}

// Handled observes one CreateContainer's handling time.
func (m *Metrics) Handled(seconds float64) { m.handled.Observe(seconds) }

// Container counts a container's outcome.
func (m *Metrics) Container(outcome string) { m.containers.WithLabelValues(outcome).Inc() }

// Unapplied counts one thing a container did not get.
func (m *Metrics) Unapplied(what string) { m.unapplied.WithLabelValues(what).Inc() }

// NodeReportNamespace is where a node's reports live: Events about a Node, which has no namespace
// of its own, go to "default" as the kubelet's do, where `kubectl describe node` finds them.
const NodeReportNamespace = "default"

// EventReporter writes what the node did not apply about a pod as an Event about its own Node,
// naming the pod in `related`, and logs every one (so that a node without API access still says
// it). A node's token may write Events about its own Node only (admission): tmc's publisher puts
// each report on the pod it names once it has checked that the pod runs on that node, so one
// node cannot speak about another node's pods.
type EventReporter struct {
	Events typedcorev1.EventsGetter // nil: log only
	Node   string
	Log    *slog.Logger
}

// Event implements Reporter. It never blocks container creation for long: the API call has a
// short deadline, and runs in the background.
func (r *EventReporter) Event(pod *api.PodSandbox, warning bool, reason, message string) {
	r.Log.Warn("tmc node event", "pod", podKey(pod), "reason", reason, "message", message)
	if r.Events == nil || pod.GetNamespace() == "" || pod.GetName() == "" {
		return
	}
	ev := NodeReport(r.Node, pod, warning, reason, message, time.Now())
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r.Events.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			r.Log.Error("event not written", "pod", podKey(pod), "reason", reason, "error", err)
		}
	}()
}

// NodeReport is the Event a node writes about one of its pods: about the Node (its UID written as
// its name, as the kubelet writes it and `kubectl describe node` searches), the pod in `related`,
// from component "tmc-nri" at host `node`. scheduler/conformance/node-report.json holds one, which
// the publisher's relay is tested against.
func NodeReport(node string, pod *api.PodSandbox, warning bool, reason, message string, at time.Time) *corev1.Event {
	kind := corev1.EventTypeNormal
	if warning {
		kind = corev1.EventTypeWarning
	}
	now := metav1.NewTime(at)
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", clip(node, 200), at.UnixNano()),
			Namespace: NodeReportNamespace,
		},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Related: &corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.GetNamespace(), Name: pod.GetName(),
			UID: types.UID(pod.GetUid()),
		},
		Reason:         reason,
		Message:        clip(fmt.Sprintf("pod %s/%s: %s", pod.GetNamespace(), pod.GetName(), message), 1000),
		Type:           kind,
		Source:         corev1.EventSource{Component: "tmc-nri", Host: node},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
}
