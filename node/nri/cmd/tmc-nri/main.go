// tmc-nri is tmc's NRI plugin: the container runtime (containerd 1.7+/2.x, CRI-O 1.26+) calls it
// when a container is created, and it applies the configuration tmc placed the container's pod
// in (LLC ways, memory nodes, memory limit, the per-structure plan and the allocator shim).
//
// "tmc-nri reconcile" is the same applier for runtimes without NRI: it applies the placements of
// the pods running on the node to their cgroups, resctrl groups and plan files, once or every
// --interval.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"tmc.dev/node-nri/internal/tmcnri"
	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "reconcile" {
		os.Exit(reconcile(os.Args[2:]))
	}
	var (
		node           = flag.String("node", env("TMC_NRI_NODE_NAME", ""), "this node's name (TMC_NRI_NODE_NAME)")
		socket         = flag.String("socket", env("TMC_NRI_SOCKET", "/var/run/nri/nri.sock"), "the runtime's NRI socket (TMC_NRI_SOCKET)")
		index          = flag.String("index", env("TMC_NRI_INDEX", "50"), "the plugin's NRI index: its order among plugins (TMC_NRI_INDEX)")
		sys            = flag.String("sys", env("TMC_NRI_SYS", "/sys"), "the host's sysfs (TMC_NRI_SYS)")
		resctrl        = flag.String("resctrl", env("TMC_NRI_RESCTRL", "/sys/fs/resctrl"), "the host's resctrl mount (TMC_NRI_RESCTRL)")
		plans          = flag.String("plan-dir", env("TMC_NRI_PLAN_DIR", "/var/lib/tmc/plans"), "host directory of plans and records, mounted at the same path (TMC_NRI_PLAN_DIR)")
		shim           = flag.String("shim-dir", env("TMC_NRI_SHIM_DIR", "/var/lib/tmc/shim"), "host directory holding libtmcalloc.so (TMC_NRI_SHIM_DIR)")
		bundled        = flag.String("bundled-shim", env("TMC_NRI_BUNDLED_SHIM", "/usr/local/lib/tmc/libtmcalloc.so"), "the shim this image carries, installed into --shim-dir when it has none ('' for none) (TMC_NRI_BUNDLED_SHIM)")
		metrics        = flag.String("metrics", env("TMC_NRI_METRICS", ":9465"), "address of /metrics ('' for none) (TMC_NRI_METRICS)")
		kubeconfig     = flag.String("kubeconfig", env("TMC_NRI_KUBECONFIG", ""), "kubeconfig for events, namespaces and the published plans; in-cluster when empty; 'none' for none of them (TMC_NRI_KUBECONFIG)")
		draCkpt        = flag.String("dra-checkpoint", env("TMC_NRI_DRA_CHECKPOINT", tmcnri.DefaultDRACheckpoint), "tmc-dra-node's checkpoint of the DRA claims it prepared, read when a container names one ('' for none) (TMC_NRI_DRA_CHECKPOINT)")
		sealKeys       = flag.String("placement-seal-keys", env("TMC_NRI_PLACEMENT_SEAL_KEYS", ""), "directory of the keys tmc's scheduler seals placements with (a mounted Secret): a placement is applied only when its seal verifies ('' for sealing off) (TMC_NRI_PLACEMENT_SEAL_KEYS)")
		acceptUnsealed = flag.Bool("placement-seal-accept-unsealed", env("TMC_NRI_PLACEMENT_SEAL_ACCEPT_UNSEALED", "") == "true", "also apply a placement with no seal at all (one with a seal is verified): for the upgrade from a release that did not seal, while its pods run (TMC_NRI_PLACEMENT_SEAL_ACCEPT_UNSEALED)")
		tenants        = flag.String("tenant-namespace-labels", env("TMC_NRI_TENANT_NAMESPACE_LABELS", ""), "key=value,... labels of the namespaces whose placements are applied (the admission policy's namespaceSelector; empty: every namespace) (TMC_NRI_TENANT_NAMESPACE_LABELS)")
	)
	// --plans was this flag's first name; tmc-nri reconcile has always said --plan-dir.
	flag.StringVar(plans, "plans", *plans, "the same as --plan-dir")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if *node == "" {
		log.Error("no node name: set TMC_NRI_NODE_NAME (downward API spec.nodeName) or --node")
		os.Exit(2)
	}
	if done, err := tmcnri.InstallShim(*bundled, *shim); err != nil {
		log.Warn("allocator shim not installed", "dir", *shim, "error", err)
	} else if done {
		log.Info("allocator shim installed", "dir", *shim, "from", *bundled)
	}
	reg := prometheus.NewRegistry()
	counts := tmcnri.NewMetrics(reg)
	reporter := &tmcnri.EventReporter{Node: *node, Log: log}
	if *kubeconfig != "none" {
		events, err := eventsClient(*kubeconfig)
		if err != nil {
			log.Warn("events are logged only", "error", err)
		} else {
			reporter.Events = events
		}
	}
	selector, err := v1alpha1.ParseTenantNamespaceLabels(*tenants)
	if err != nil {
		log.Error("--tenant-namespace-labels", "error", err)
		os.Exit(2)
	}
	seals, err := v1alpha1.LoadSealKeys(*sealKeys, "")
	seals.AcceptUnsealed(*acceptUnsealed)
	if err != nil {
		log.Error("--placement-seal-keys", "error", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := tmcnri.Config{
		NodeName: *node, SysRoot: *sys, Resctrl: &tmcnri.Resctrl{Root: *resctrl},
		PlanDir: *plans, ShimDir: *shim, Tenants: selector, DRACheckpoint: *draCkpt, Seals: seals,
	}
	if !selector.Every() {
		// Placements are applied only in tenant namespaces: the plugin needs their labels, and
		// refuses placed containers until it has listed them (the kubelet retries).
		if *kubeconfig == "none" {
			log.Error("--tenant-namespace-labels needs the API server: give --kubeconfig, or run in-cluster")
			os.Exit(2)
		}
		client, err := kubeClient(*kubeconfig)
		if err != nil {
			log.Error("no API server for the tenant namespaces", "error", err)
			os.Exit(1)
		}
		namespaces, err := tmcnri.WatchNamespaces(client, ctx.Done())
		if err != nil {
			log.Error("cannot watch namespaces", "error", err)
			os.Exit(1)
		}
		cfg.Namespaces = namespaces
	}
	if *kubeconfig != "none" {
		// Placements of schema tmc.placement/v3 name the published recommendation their plan is
		// in: the plugin refuses such containers until it has listed them (the kubelet retries).
		objects, err := dynamicClient(*kubeconfig)
		if err != nil {
			log.Warn("published plans cannot be read: pods placed from them run without their per-structure plan", "error", err)
		} else if plans, err := tmcnri.WatchPlans(objects, ctx.Done()); err != nil {
			log.Error("cannot watch the published recommendations", "error", err)
			os.Exit(1)
		} else {
			cfg.Plans = plans
		}
	}
	plugin := tmcnri.New(cfg, reporter, counts)
	if *metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Addr: *metrics, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "error", err)
			}
		}()
	}

	// The runtime may restart (or not be up yet): connect again until told to stop. Containers
	// created meanwhile are found by Synchronize when the plugin connects.
	for ctx.Err() == nil {
		s, err := stub.New(plugin, stub.WithPluginName("tmc"), stub.WithPluginIdx(*index),
			stub.WithSocketPath(*socket), stub.WithOnClose(func() { log.Warn("the runtime closed the NRI connection") }))
		if err != nil {
			log.Error("cannot make the NRI plugin", "error", err)
			os.Exit(1)
		}
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			log.Warn("NRI connection ended; reconnecting", "error", err, "socket", *socket)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// restConfig is the API server's address and credentials: the kubeconfig given, else the pod's
// service account.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("no API server: %w", err)
	}
	return cfg, nil
}

func eventsClient(kubeconfig string) (typedcorev1.EventsGetter, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return typedcorev1.NewForConfig(cfg)
}

func dynamicClient(kubeconfig string) (dynamic.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
