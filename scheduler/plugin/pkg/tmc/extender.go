package tmc

import (
	"context"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Extender is the engine's second front door: kube-scheduler's HTTP extender protocol (filter,
// prioritize, bind; k8s.io/kube-scheduler/extender/v1, PascalCase keys), for clusters that keep
// the stock kube-scheduler. It answers with the same Engine as the framework plugin: the same
// ask, fit, score, reservation and Binding, from the same informers and published
// recommendations. Errors are the envelope's Error field, never a problem document.
type Extender struct {
	engine *Engine
	pods   corelisters.PodLister
	nodes  corelisters.NodeLister
	// clientNames, when not empty, are the certificate common names that may call the verbs.
	clientNames map[string]bool
	// requireClientCert: the verbs need a verified client certificate (the server's TLS
	// configuration asks for one and checks it against the scheduler's CA).
	requireClientCert bool
	maxBodyBytes      int64
	ready             func() bool

	metrics *extenderMetrics

	mu sync.Mutex
	// binding holds the pods a bind is in flight for: one attempt per pod at a time, so that a
	// failed attempt never releases the room another attempt is binding with.
	binding map[types.UID]string
}

// ExtenderOptions configure an Extender.
type ExtenderOptions struct {
	// RequireClientCert: refuse the verbs to a caller without a verified client certificate.
	RequireClientCert bool
	// ClientNames: the only common names that may call the verbs (empty: any the CA signed).
	ClientNames []string
	// MaxBodyBytes bounds a request body (default 16 MiB).
	MaxBodyBytes int64
	// Ready says whether the informers have synced (default: always).
	Ready func() bool
}

// DefaultMaxBodyBytes bounds a verb's body: 5,000 full Node objects are about 12 MiB.
const DefaultMaxBodyBytes = 16 << 20

// NewExtender is the extender over an engine and the informers' listers.
func NewExtender(engine *Engine, pods corelisters.PodLister, nodes corelisters.NodeLister, opts ExtenderOptions) *Extender {
	x := &Extender{
		engine: engine, pods: pods, nodes: nodes, requireClientCert: opts.RequireClientCert,
		maxBodyBytes: opts.MaxBodyBytes, ready: opts.Ready, binding: map[types.UID]string{},
		clientNames: map[string]bool{}, metrics: newExtenderMetrics(),
	}
	for _, n := range opts.ClientNames {
		x.clientNames[n] = true
	}
	if x.maxBodyBytes <= 0 {
		x.maxBodyBytes = DefaultMaxBodyBytes
	}
	if x.ready == nil {
		x.ready = func() bool { return true }
	}
	return x
}

// Handler serves POST <prefix>/filter, /prioritize and /bind, and GET /healthz and /readyz.
func (x *Extender) Handler(prefix string) http.Handler {
	prefix = "/" + strings.Trim(prefix, "/")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if x.ready() {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "syncing"})
	})
	// /metrics needs no client certificate, as the probes: Prometheus scrapes it with the CA.
	mux.Handle("GET /metrics", promhttp.HandlerFor(x.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST "+prefix+"/filter", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		start := time.Now()
		if x.read(w, r, &args, "filter") {
			out := x.Filter(&args)
			writeJSON(w, http.StatusOK, out)
			x.metrics.done("filter", map[bool]string{true: "error", false: "ok"}[out.Error != ""], start)
		}
	})
	mux.HandleFunc("POST "+prefix+"/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		start := time.Now()
		if x.read(w, r, &args, "prioritize") {
			writeJSON(w, http.StatusOK, x.Prioritize(&args))
			x.metrics.done("prioritize", "ok", start)
		}
	})
	mux.HandleFunc("POST "+prefix+"/bind", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderBindingArgs
		start := time.Now()
		if x.read(w, r, &args, "bind") {
			out := x.Bind(r.Context(), &args)
			writeJSON(w, http.StatusOK, out)
			x.metrics.done("bind", map[bool]string{true: "error", false: "ok"}[out.Error != ""], start)
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	raw, err := json.Marshal(body)
	if err != nil {
		status, raw = http.StatusInternalServerError, []byte(`{"Error":"tmc: the answer could not be written"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(raw)))
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

var commonNameOID = asn1.ObjectIdentifier{2, 5, 4, 3}

// Authorised is "" when the request's caller may use the verbs, else why not: with TLS, a
// verified client certificate whose subject names exactly one common name, one of clientNames
// when they are given (a subject naming several is refused, whichever comes last).
func (x *Extender) Authorised(r *http.Request) string {
	if !x.requireClientCert {
		return ""
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return "tmc: a client certificate is required"
	}
	return authorisedCert(r.TLS.PeerCertificates[0], x.clientNames)
}

func authorisedCert(cert *x509.Certificate, allowed map[string]bool) string {
	if len(allowed) == 0 {
		return ""
	}
	var names []string
	for _, attr := range cert.Subject.Names {
		if attr.Type.Equal(commonNameOID) {
			name, _ := attr.Value.(string)
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		return "tmc: the client certificate's subject must name exactly one CN"
	}
	if !allowed[names[0]] {
		return "tmc: this client certificate may not call the extender"
	}
	return ""
}

// read authorises the call and decodes its body into into; false when it answered already.
func (x *Extender) read(w http.ResponseWriter, r *http.Request, into any, verb string) bool {
	if why := x.Authorised(r); why != "" {
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusUnauthorized, map[string]string{"Error": why})
		x.metrics.calls.WithLabelValues(verb, "unauthorised").Inc()
		return false
	}
	if r.ContentLength > x.maxBodyBytes {
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"Error": "tmc: the body is too large"})
		x.metrics.calls.WithLabelValues(verb, "bad_request").Inc()
		return false
	}
	body := http.MaxBytesReader(w, r.Body, x.maxBodyBytes)
	raw, err := io.ReadAll(body)
	if err == nil {
		err = json.Unmarshal(raw, into)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"Error": "tmc: the body is not an extender request: " + clip(err.Error(), 200)})
		x.metrics.calls.WithLabelValues(verb, "bad_request").Inc()
		return false
	}
	return true
}

// extenderMetrics are the extender's Prometheus series, named and labelled as the chart's
// alerts and docs/operations.md expect them.
type extenderMetrics struct {
	registry  *prometheus.Registry
	calls     *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	bindPhase *prometheus.HistogramVec
}

func newExtenderMetrics() *extenderMetrics {
	m := &extenderMetrics{
		registry: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tmc_extender_requests_total", Help: "Extender calls by verb and outcome",
		}, []string{"verb", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tmc_extender_request_duration_seconds",
			Help:    "Extender handling time by verb (body read to answer written)",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0},
		}, []string{"verb"}),
		bindPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tmc_extender_bind_phase_seconds",
			Help:    "Where a bind's time goes: reading the pod, assuming its reservation, and the Binding",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5},
		}, []string{"phase"}),
	}
	m.registry.MustRegister(m.calls, m.latency, m.bindPhase)
	// The engine's binds, as the plugin exports them on tmc-scheduler's /metrics.
	m.registry.MustRegister(placement.collectors()...)
	return m
}

func (m *extenderMetrics) done(verb, outcome string, start time.Time) {
	m.calls.WithLabelValues(verb, outcome).Inc()
	m.latency.WithLabelValues(verb).Observe(time.Since(start).Seconds())
}

// candidates are the nodes of a filter or prioritize request: the Node objects when the
// scheduler sent them (nodeCacheCapable: false), else the informer's nodes by name (nil for a
// name it does not know).
func (x *Extender) candidates(args *extenderv1.ExtenderArgs) (names []string, nodes []*v1.Node) {
	if args.NodeNames != nil {
		names = *args.NodeNames
		nodes = make([]*v1.Node, len(names))
		for i, name := range names {
			if node, err := x.nodes.Get(name); err == nil {
				nodes[i] = node
			}
		}
		return names, nodes
	}
	if args.Nodes != nil {
		for i := range args.Nodes.Items {
			names = append(names, args.Nodes.Items[i].Name)
			nodes = append(nodes, &args.Nodes.Items[i])
		}
	}
	return names, nodes
}

// Filter keeps the nodes that can hold the pod's configuration now, answering in the form it
// was asked (NodeNames for names, Nodes for objects: answering names to a request of objects
// would silently reject every node).
func (x *Extender) Filter(args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	out := x.filter(args)
	// kube-scheduler reports the answer's texts in the pod's event and condition, as a plugin's.
	out.Error = schedulerText(out.Error)
	for _, reasons := range []extenderv1.FailedNodesMap{out.FailedNodes, out.FailedAndUnresolvableNodes} {
		for name, reason := range reasons {
			reasons[name] = schedulerText(reason)
		}
	}
	return out
}

func (x *Extender) filter(args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	out := &extenderv1.ExtenderFilterResult{FailedNodes: extenderv1.FailedNodesMap{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}
	if args.Pod == nil {
		out.Error = "tmc: the request names no Pod"
		return out
	}
	names, nodes := x.candidates(args)
	ask, refused := x.engine.Ask(args.Pod)
	if ask != nil {
		// Asked to place a pod: this replica's scheduler leads, so contend for the placement
		// lease before the first bind needs it.
		x.engine.fence.Campaign()
	}
	var kept []int
	switch {
	case refused != nil && refused.Waiting:
		out.Error = refused.Message // the scheduler tries the pod again with its backoff
		return out
	case refused != nil:
		for _, name := range names {
			out.FailedAndUnresolvableNodes[name] = refused.Message
		}
	case ask == nil:
		// Not tmc's pod (only opted-in pods are sent, by managedResources): every node is kept.
		for i := range names {
			kept = append(kept, i)
		}
	default:
		for i, name := range names {
			switch v := x.engine.Fit(nodes[i], ask); {
			case v == nil:
				kept = append(kept, i)
			case v.Unresolvable:
				out.FailedAndUnresolvableNodes[name] = v.Reason
			default:
				out.FailedNodes[name] = v.Reason
			}
		}
	}
	if len(kept) == 0 && len(out.FailedNodes) > 0 {
		// Nothing fits now but some node may once room is freed. An error makes kube-scheduler
		// try the pod again on its backoff: this process's informers and kube-scheduler's are
		// two watches, and the event that frees the room may reach kube-scheduler (and move
		// the pod) before it reaches this cache, after which no further event would come.
		out.Error = fullNowError(out.FailedNodes, out.FailedAndUnresolvableNodes)
	}
	if args.NodeNames != nil {
		keptNames := make([]string, 0, len(kept))
		for _, i := range kept {
			keptNames = append(keptNames, names[i])
		}
		out.NodeNames = &keptNames
		return out
	}
	list := &v1.NodeList{Items: make([]v1.Node, 0, len(kept))}
	for _, i := range kept {
		list.Items = append(list.Items, *nodes[i])
	}
	out.Nodes = list
	return out
}

// FullNowPrefix starts the error a filter answers when no node fits now but some may later.
const FullNowPrefix = "tmc: no node can hold the pod now; tried again on backoff: "

// fullNowError lists each refused node with its reason ("name: reason; ..."), bounded.
func fullNowError(full, never extenderv1.FailedNodesMap) string {
	var b strings.Builder
	b.WriteString(FullNowPrefix)
	names := make([]string, 0, len(full)+len(never))
	for name := range full {
		names = append(names, name)
	}
	for name := range never {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		reason, ok := full[name]
		if !ok {
			reason = never[name]
		}
		if b.Len() > 8192 {
			fmt.Fprintf(&b, "; and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(name + ": " + reason)
	}
	return b.String()
}

// Prioritize scores the nodes that passed Filter, 0..10, as the plugin's NormalizeScore does
// before its scaling to 0..100.
func (x *Extender) Prioritize(args *extenderv1.ExtenderArgs) *extenderv1.HostPriorityList {
	names, nodes := x.candidates(args)
	out := make(extenderv1.HostPriorityList, len(names))
	var ask *PodAsk
	if args.Pod != nil {
		ask, _ = x.engine.Ask(args.Pod)
	}
	raw := make([]int, len(names))
	for i, name := range names {
		out[i] = extenderv1.HostPriority{Host: name}
		if ask != nil {
			raw[i] = x.engine.RawScore(nodes[i], ask)
		}
	}
	if ask != nil {
		for i, score := range Normalize(raw) {
			out[i].Score = int64(score)
		}
	}
	return &out
}

// Bind binds the pod named, with the uid given, to the node: the API server (through the
// informer, else a read) is the truth for who the pod is, where it runs and what it asks, never
// a filter's copy of it. A pod already bound to the node is a success that changes nothing; one
// bound elsewhere is an error that changes nothing; one attempt per pod at a time.
func (x *Extender) Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult {
	fail := func(format string, a ...any) *extenderv1.ExtenderBindingResult {
		return &extenderv1.ExtenderBindingResult{Error: schedulerText(fmt.Sprintf(format, a...))}
	}
	ns, name, uid, nodeName := args.PodNamespace, args.PodName, args.PodUID, args.Node
	if ns == "" || name == "" || uid == "" || nodeName == "" {
		return fail("tmc: bind needs PodName, PodNamespace, PodUID and Node")
	}
	started := time.Now()
	pod, err := x.pod(ctx, ns, name, uid)
	x.metrics.bindPhase.WithLabelValues("read_pod").Observe(time.Since(started).Seconds())
	if err != nil {
		return fail("tmc: cannot read pod %s/%s: %v", ns, name, err)
	}
	if pod.UID != uid {
		return fail("tmc: pod %s/%s is not the pod %s", ns, name, uid)
	}
	if held, ok := x.engine.cache.Held(uid); ok && held.Bound && pod.Spec.NodeName == "" {
		pod = pod.DeepCopy() // bound by this extender; the informer has not said so yet
		pod.Spec.NodeName = held.Node
	}
	switch pod.Spec.NodeName {
	case nodeName:
		return &extenderv1.ExtenderBindingResult{} // a retry of a bind that succeeded
	case "":
	default:
		return fail("tmc: pod %s/%s is already bound to %s", ns, name, pod.Spec.NodeName)
	}
	ask, refused := x.engine.Ask(pod)
	if refused != nil {
		return fail("%s", refused.Message)
	}
	if ask == nil {
		return fail("tmc: pod %s/%s does not request tiered memory", ns, name)
	}
	x.mu.Lock()
	if other, busy := x.binding[uid]; busy {
		x.mu.Unlock()
		return fail("tmc: pod %s/%s is being bound to %s by another attempt", ns, name, other)
	}
	x.binding[uid] = nodeName
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.binding, uid)
		x.mu.Unlock()
	}()
	node, err := x.nodes.Get(nodeName)
	if err != nil {
		return fail("tmc: node %s: %v", nodeName, err)
	}
	started = time.Now()
	if _, err := x.engine.Reserve(uid, node, ask); err != nil {
		// Filter offered a node that a bind since filled: the scheduler tries again.
		return fail("%s", err.Error())
	}
	x.metrics.bindPhase.WithLabelValues("assume").Observe(time.Since(started).Seconds())
	started = time.Now()
	err = x.engine.Bind(ctx, pod, ask, nodeName)
	x.metrics.bindPhase.WithLabelValues("binding").Observe(time.Since(started).Seconds())
	if err != nil {
		if x.boundHere(ctx, ns, name, uid, nodeName) {
			return &extenderv1.ExtenderBindingResult{}
		}
		x.engine.Forget(uid)
		klog.InfoS("bind failed", "pod", klog.KRef(ns, name), "node", nodeName, "err", err)
		return fail("%s", err.Error())
	}
	return &extenderv1.ExtenderBindingResult{}
}

// pod is the pod as the informer has it when that is the pod named, else as the API server does.
func (x *Extender) pod(ctx context.Context, ns, name string, uid types.UID) (*v1.Pod, error) {
	if x.pods != nil {
		if pod, err := x.pods.Pods(ns).Get(name); err == nil && pod.UID == uid {
			return pod, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return x.engine.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

func (x *Extender) boundHere(ctx context.Context, ns, name string, uid types.UID, node string) bool {
	pod, err := x.engine.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			klog.InfoS("reading a pod back after a failed bind", "pod", klog.KRef(ns, name), "err", err)
		}
		return false
	}
	return pod.UID == uid && pod.Spec.NodeName == node
}
