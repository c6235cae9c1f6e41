// Command tmc-extender is the tmc placement engine behind kube-scheduler's HTTP extender
// protocol (filter, prioritize, bind), for clusters that keep the stock kube-scheduler: the same
// engine as tmc-scheduler's TmcPlacement plugin (package tmc), fed by the same informers and the
// published TieredRecommendation objects, served over HTTPS with mutual TLS.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/tmc"
)

type options struct {
	kubeconfig, listen, prefix      string
	certFile, keyFile, clientCAFile string
	clientNames                     string
	insecureHTTP                    bool
	recommendationWait              time.Duration
	qps                             float64
	burst                           int
	maxBodyBytes                    int64
	rackPools                       string
	placementLease                  string
	requiredNodePlugin              string
	pprofAddress                    string
	tenantNamespaces                string
	planByReference                 bool
	placementSealKeys               string
	placementSealSigningKey         string
	placementSealAcceptUnsealed     bool
	leaseDuration, renewDeadline    time.Duration
	retryPeriod                     time.Duration
}

func parse() options {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: the pod's service account)")
	flag.StringVar(&o.listen, "listen", ":8888", "address the verbs are served on")
	flag.StringVar(&o.prefix, "prefix", "/scheduler", "URL prefix of the verbs (the extender's urlPrefix)")
	flag.StringVar(&o.certFile, "tls-cert-file", "", "the server's certificate (PEM)")
	flag.StringVar(&o.keyFile, "tls-key-file", "", "the server's private key (PEM)")
	flag.StringVar(&o.clientCAFile, "client-ca-file", "", "CA that signs the scheduler's client certificate (PEM)")
	flag.StringVar(&o.clientNames, "client-names", "", "comma-separated common names that may call the verbs (empty: any the CA signed)")
	flag.BoolVar(&o.insecureHTTP, "insecure-http", false, "serve the verbs over plain HTTP, unauthenticated (tests and demos only)")
	flag.DurationVar(&o.recommendationWait, "recommendation-wait", tmc.DefaultRecommendationWait,
		"how long a pod of a pair with no published recommendation waits for it before the fallback (0..5m; negative, the default: until it is published)")
	flag.Float64Var(&o.qps, "kube-api-qps", 200, "requests per second to the API server")
	flag.IntVar(&o.burst, "kube-api-burst", 400, "burst of requests to the API server")
	flag.Int64Var(&o.maxBodyBytes, "max-body-bytes", tmc.DefaultMaxBodyBytes,
		"the largest request body (bytes); node names for 20,000 nodes are ~0.3 MiB")
	flag.StringVar(&o.rackPools, "rack-pools", "",
		"the rack pools' sizes the operator sets, name=quantity,... (256Gi): authoritative over what nodes publish")
	flag.StringVar(&o.placementLease, "placement-lease", "",
		"namespace/name of the Lease this replica must hold, freshly renewed, at each bind, so that a "+
			"leader paused and resumed binds nothing from its stale cache (empty: no fence; the chart sets it with leader election)")
	flag.StringVar(&o.requiredNodePlugin, "required-node-plugin", "",
		"the NRI plugin a placed pod's containers require on the node (\"tmc\" where nodes run tmc-nri; empty: none)")
	flag.StringVar(&o.tenantNamespaces, "tenant-namespace-labels", "",
		"key=value,... labels of the namespaces tmc places pods in (the admission policy's namespaceSelector; empty: every namespace)")
	flag.BoolVar(&o.planByReference, "plan-by-reference", false,
		"placements name the published plan (tmc.placement/v3) instead of carrying it; only once every node's tmc-nri reads v3")
	flag.StringVar(&o.placementSealKeys, "placement-seal-keys", "",
		"directory of the keys that seal placements (a mounted Secret, one file per key named by its id): "+
			"every placement is sealed, and a bound pod's counts only when its seal verifies (empty: sealing off)")
	flag.StringVar(&o.placementSealSigningKey, "placement-seal-signing-key", "",
		"the id of the key in --placement-seal-keys that seals the placements this replica writes")
	flag.BoolVar(&o.placementSealAcceptUnsealed, "placement-seal-accept-unsealed", false,
		"also count a placement with no seal at all (one with a seal is verified): for the upgrade from a release that did not seal, while its pods run")
	flag.StringVar(&o.pprofAddress, "pprof-address", "",
		"serve Go's profiler (/debug/pprof) on this address, e.g. 127.0.0.1:6060 (empty: not served; never expose it)")
	flag.DurationVar(&o.leaseDuration, "placement-lease-duration", 15*time.Second, "the placement lease's duration")
	flag.DurationVar(&o.renewDeadline, "placement-renew-deadline", 10*time.Second, "how long the holder keeps trying to renew it")
	flag.DurationVar(&o.retryPeriod, "placement-retry-period", 2*time.Second, "how often it is renewed or contended for")
	klog.InitFlags(nil)
	flag.Parse()
	return o
}

func main() {
	if err := run(parse()); err != nil {
		fmt.Fprintln(os.Stderr, "tmc-extender:", err)
		os.Exit(1)
	}
}

func tlsConfig(o options) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
	if err != nil {
		return nil, fmt.Errorf("the server certificate: %w", err)
	}
	pem, err := os.ReadFile(o.clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("the client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the client CA %s holds no PEM certificate", o.clientCAFile)
	}
	// A certificate is optional at the TLS layer (probes connect without one) and checked
	// against the CA when given; the verbs insist on a verified one (Extender.Authorised).
	// HTTP/2 is offered first: kube-scheduler's extender client negotiates it (its transport
	// is apimachinery's, with HTTP/2 configured) and then sends every verb, binds in flight
	// included, as streams of one connection. Over HTTP/1.1 it keeps two idle connections, so
	// a burst's concurrent binds open new ones, each a TLS handshake on both sides.
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}

// placementFence is the lease every bind needs (nil without --placement-lease), validated as the
// plugin's placementLease is: whole seconds, retry < renew deadline < duration <= 300 s.
func placementFence(ctx context.Context, client kubernetes.Interface, o options) (*tmc.Fence, error) {
	if o.placementLease == "" {
		return nil, nil
	}
	namespace, name, ok := strings.Cut(o.placementLease, "/")
	if !ok {
		return nil, fmt.Errorf("--placement-lease: %q is not namespace/name", o.placementLease)
	}
	seconds := func(flagName string, d time.Duration) (*int64, error) {
		if d <= 0 || d%time.Second != 0 {
			return nil, fmt.Errorf("--%s must be a positive whole number of seconds, not %s", flagName, d)
		}
		s := int64(d / time.Second)
		return &s, nil
	}
	args := &tmc.FenceArgs{Namespace: namespace, Name: name}
	var err error
	if args.LeaseDurationSeconds, err = seconds("placement-lease-duration", o.leaseDuration); err != nil {
		return nil, err
	}
	if args.RenewDeadlineSeconds, err = seconds("placement-renew-deadline", o.renewDeadline); err != nil {
		return nil, err
	}
	if args.RetryPeriodSeconds, err = seconds("placement-retry-period", o.retryPeriod); err != nil {
		return nil, err
	}
	fence, err := tmc.NewFence(ctx, client, args)
	if err != nil {
		return nil, err
	}
	// The extender is not its scheduler: it lets the lease go once its scheduler stops asking
	// it to place pods for a lease's duration, so that another pair can take over.
	if err := fence.ReleaseWhenIdle(o.leaseDuration); err != nil {
		return nil, err
	}
	return fence, nil
}

// serveProfiler serves Go's CPU, heap and goroutine profiles on their own listener, apart from
// the verbs' (which need a client certificate): for a benchmark or an operator on the node.
func serveProfiler(ctx context.Context, address string) (string, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return "", fmt.Errorf("--pprof-address: %w", err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	go func() { _ = server.Serve(listener) }()
	klog.InfoS("serving the profiler", "address", listener.Addr().String())
	return listener.Addr().String(), nil
}

// listen is the verbs' server and its listener: TLS (HTTP/2 or HTTP/1.1, tlsConfig) when secure.
func listen(o options, secure bool, handler http.Handler) (*http.Server, net.Listener, error) {
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       60 * time.Second, // a slow body (slowloris) is cut
		IdleTimeout:       120 * time.Second,
	}
	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, nil, err
	}
	if secure {
		tc, err := tlsConfig(o)
		if err != nil {
			_ = listener.Close()
			return nil, nil, err
		}
		listener = tls.NewListener(listener, tc)
	}
	return server, listener, nil
}

func run(o options) error {
	if o.maxBodyBytes < 1024 || o.maxBodyBytes > 1<<30 {
		return fmt.Errorf("--max-body-bytes must be in 1 KiB..1 GiB, not %d", o.maxBodyBytes)
	}
	if o.recommendationWait < 0 {
		o.recommendationWait = tmc.WaitUntilPublished // any negative wait: until published
	}
	if o.recommendationWait > 5*time.Minute {
		return fmt.Errorf("--recommendation-wait must be negative (until published) or in 0..5m, not %s", o.recommendationWait)
	}
	given := map[string]string{}
	for _, pair := range strings.Split(o.rackPools, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, size, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("--rack-pools: %q is not name=quantity", pair)
		}
		given[name] = size
	}
	pools, err := tmc.ParseRackPools(given)
	if err != nil {
		return fmt.Errorf("--rack-pools: %w", err)
	}
	tenants, err := v1alpha1.ParseTenantNamespaceLabels(o.tenantNamespaces)
	if err != nil {
		return fmt.Errorf("--tenant-namespace-labels: %w", err)
	}
	seals, err := tmc.LoadSealKeys(o.placementSealKeys, o.placementSealSigningKey)
	if err != nil {
		return fmt.Errorf("--placement-seal-keys: %w", err)
	}
	seals.AcceptUnsealed(o.placementSealAcceptUnsealed)
	secure := o.certFile != "" || o.keyFile != "" || o.clientCAFile != ""
	if secure && (o.certFile == "" || o.keyFile == "" || o.clientCAFile == "") {
		return errors.New("TLS needs --tls-cert-file, --tls-key-file and --client-ca-file together")
	}
	if !secure && !o.insecureHTTP {
		return errors.New("refusing to serve the verbs unauthenticated: give --tls-cert-file, " +
			"--tls-key-file and --client-ca-file (the chart does), or --insecure-http on purpose")
	}
	var config *rest.Config
	if o.kubeconfig != "" {
		config, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		config, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("no Kubernetes API to talk to (%w): run it in a pod, or give --kubeconfig", err)
	}
	config.QPS, config.Burst = float32(o.qps), o.burst
	// The typed client (the pod and node informers, the Binding, the placement lease) speaks
	// protobuf, as kube-scheduler's does: its watch of every pod and node decodes cheaper than
	// JSON, and the API server serves it from the encoding it keeps for kube-scheduler. The
	// published recommendations are custom resources, read as JSON by their own client.
	typed := rest.CopyConfig(config)
	typed.ContentType = "application/vnd.kubernetes.protobuf"
	typed.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	fence, err := placementFence(ctx, client, o)
	if err != nil {
		return err
	}
	// The engine's client binds: the placement lease is checked again as each Binding leaves,
	// after the client's rate limiter (fence.BindingTransport), not only before the call.
	binding := rest.CopyConfig(typed)
	binding.Wrap(fence.BindingTransport)
	binder, err := kubernetes.NewForConfig(binding)
	if err != nil {
		return err
	}
	engine := tmc.NewEngine(binder, nil, o.recommendationWait)
	tmc.SetRackPools(engine, pools)
	tmc.SetFence(engine, fence)
	// Events about the pods it binds (events.k8s.io, as kube-scheduler writes its own).
	recorder := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	recorder.StartRecordingToSink(ctx.Done())
	defer recorder.Shutdown()
	tmc.SetRecorder(engine, recorder.NewRecorder(scheme.Scheme, "tmc-extender"))
	if err := tmc.RequireNodePlugin(engine, o.requiredNodePlugin); err != nil {
		return fmt.Errorf("--required-node-plugin: %w", err)
	}
	tmc.SetTenantNamespaces(engine, tenants)
	tmc.SetSealKeys(engine, seals)
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := engine.Watch(factory); err != nil {
		return err
	}
	pods, nodes := factory.Core().V1().Pods(), factory.Core().V1().Nodes()
	factory.Start(ctx.Done())
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	published, err := tmc.WatchRecommendations(ctx, dyn, o.planByReference)
	if err != nil {
		return err
	}
	tmc.SetPublished(engine, published)
	synced := func() bool {
		return pods.Informer().HasSynced() && nodes.Informer().HasSynced() && engine.NamespacesSynced()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return errors.New("stopped before the informers synced")
	}
	klog.InfoS("listed the API server", "reservations", engine.Cache().Len())

	var names []string
	for _, n := range strings.Split(o.clientNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	ext := tmc.NewExtender(engine, pods.Lister(), nodes.Lister(), tmc.ExtenderOptions{
		RequireClientCert: secure, ClientNames: names, Ready: synced, MaxBodyBytes: o.maxBodyBytes,
	})
	server, listener, err := listen(o, secure, ext.Handler(o.prefix))
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	if o.pprofAddress != "" {
		if _, err := serveProfiler(ctx, o.pprofAddress); err != nil {
			return err
		}
	}
	scheme := map[bool]string{true: "https", false: "http"}[secure]
	klog.InfoS("serving the extender verbs", "address", fmt.Sprintf("%s://%s%s", scheme, listener.Addr(), o.prefix))
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
