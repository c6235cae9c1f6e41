package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"tmc.dev/node-nri/internal/tmcnri"
	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// reconcile is "tmc-nri reconcile": placements applied to running pods, for a runtime without
// NRI. It returns the process's exit status.
func reconcile(args []string) int {
	fs := flag.NewFlagSet("tmc-nri reconcile", flag.ContinueOnError)
	var (
		node           = fs.String("node", env("TMC_NRI_NODE_NAME", ""), "this node's name (TMC_NRI_NODE_NAME)")
		sys            = fs.String("sys", env("TMC_NRI_SYS", "/sys"), "the host's sysfs (TMC_NRI_SYS)")
		resctrl        = fs.String("resctrl", env("TMC_NRI_RESCTRL", "/sys/fs/resctrl"), "the host's resctrl mount (TMC_NRI_RESCTRL)")
		plans          = fs.String("plan-dir", env("TMC_NRI_PLAN_DIR", "/var/lib/tmc/plans"), "the node's plan directory, where a pod that mounts it reads <uid>.plan; empty: no plans (TMC_NRI_PLAN_DIR)")
		cgroups        = fs.String("cgroup-root", env("TMC_NRI_CGROUP_ROOT", "/sys/fs/cgroup"), "the host's cgroup v2 mount (TMC_NRI_CGROUP_ROOT)")
		kubeconfig     = fs.String("kubeconfig", env("TMC_NRI_KUBECONFIG", ""), "kubeconfig for the node's pods, namespaces and the published plans; in-cluster when empty (TMC_NRI_KUBECONFIG)")
		podsFile       = fs.String("pods", "", "a pod list (kubectl get pods -o json) to read instead of the API server; read again each round")
		tenants        = fs.String("tenant-namespace-labels", env("TMC_NRI_TENANT_NAMESPACE_LABELS", ""), "key=value,... labels of the namespaces whose placements are applied (empty: every namespace) (TMC_NRI_TENANT_NAMESPACE_LABELS)")
		sealKeys       = fs.String("placement-seal-keys", env("TMC_NRI_PLACEMENT_SEAL_KEYS", ""), "directory of the keys tmc's scheduler seals placements with: a placement is applied only when its seal verifies ('' for sealing off) (TMC_NRI_PLACEMENT_SEAL_KEYS)")
		acceptUnsealed = fs.Bool("placement-seal-accept-unsealed", env("TMC_NRI_PLACEMENT_SEAL_ACCEPT_UNSEALED", "") == "true", "also apply a placement with no seal at all (one with a seal is verified): for the upgrade from a release that did not seal, while its pods run (TMC_NRI_PLACEMENT_SEAL_ACCEPT_UNSEALED)")
		interval       = fs.Duration("interval", 0, "apply again every interval (0: once, then exit)")
		draCkpt        = fs.String("dra-checkpoint", env("TMC_NRI_DRA_CHECKPOINT", tmcnri.DefaultDRACheckpoint), "tmc-dra-node's checkpoint of the DRA claims it prepared: the pods a claim is reserved for get its configuration ('' for none) (TMC_NRI_DRA_CHECKPOINT)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if *node == "" {
		log.Error("no node name: set TMC_NRI_NODE_NAME (downward API spec.nodeName) or --node")
		return 2
	}
	selector, err := v1alpha1.ParseTenantNamespaceLabels(*tenants)
	if err != nil {
		log.Error("--tenant-namespace-labels", "error", err)
		return 2
	}
	seals, err := v1alpha1.LoadSealKeys(*sealKeys, "")
	seals.AcceptUnsealed(*acceptUnsealed)
	if err != nil {
		log.Error("--placement-seal-keys", "error", err)
		return 2
	}
	var client kubernetes.Interface
	var objects dynamic.Interface
	if *podsFile == "" || !selector.Every() {
		if client, err = kubeClient(*kubeconfig); err != nil {
			log.Error("no API server for the node's pods and namespaces", "error", err)
			return 1
		}
		if objects, err = dynamicClient(*kubeconfig); err != nil {
			log.Error("no API server for the published recommendations", "error", err)
			return 1
		}
	}
	r := &tmcnri.Reconciler{NodeName: *node, SysRoot: *sys, Resctrl: &tmcnri.Resctrl{Root: *resctrl},
		CgroupRoot: *cgroups, PlanDir: *plans, Tenants: selector, DRACheckpoint: *draCkpt, Seals: seals}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// A pod's lasting gaps (its plan, say) are logged when they change, not every round.
	said := map[string][]string{}
	round := func() bool {
		var pods []corev1.Pod
		var err error
		if *podsFile != "" {
			pods, err = tmcnri.ReadPodList(*podsFile)
		} else {
			pods, err = tmcnri.ListPods(ctx, client, *node)
		}
		if err != nil {
			log.Error("cannot read the node's pods", "error", err)
			return false
		}
		if objects != nil {
			// Listed after the pods: a pod listed was bound from a generation already written,
			// which this list holds (in the spec, or the status's earlier plans).
			// A failed list keeps the last one: placements that carry their plans (v2) and the
			// removal of what pods gone left do not depend on it.
			if plans, err := tmcnri.ListPlans(ctx, objects); err != nil {
				log.Warn("cannot list the published recommendations; the last list stands", "error", err)
			} else {
				r.Plans = plans
			}
		}
		if !selector.Every() {
			namespaces, err := tmcnri.ListNamespaces(ctx, client)
			if err != nil {
				log.Error("cannot list the tenant namespaces", "error", err)
				return false
			}
			r.Namespaces = namespaces
		}
		seen := map[string][]string{}
		for _, done := range r.Reconcile(pods) {
			seen[done.Pod] = done.Unapplied
			if len(done.Written) > 0 {
				log.Info("placement applied", "pod", done.Pod, "written", done.Written, "not_applied", done.Unapplied)
			} else if !slices.Equal(said[done.Pod], done.Unapplied) {
				log.Warn("placement not fully applied", "pod", done.Pod, "not_applied", done.Unapplied)
			}
		}
		said = seen
		if removed, err := r.RemoveStale(pods); err != nil {
			log.Warn("what pods gone left was not all removed", "removed", removed, "error", err)
		} else if len(removed) > 0 {
			log.Info("what pods gone left removed", "removed", removed)
		}
		return true
	}
	ok := round()
	if *interval <= 0 {
		if !ok {
			return 1
		}
		return 0
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
			round()
		}
	}
}
