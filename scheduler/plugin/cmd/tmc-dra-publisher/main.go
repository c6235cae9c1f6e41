// Command tmc-dra-publisher publishes tmc's Dynamic Resource Allocation devices: it watches the
// cluster's Nodes and keeps the ResourceSlices of the driver tmc.dev equal to what package dra
// makes of the tiered capacity the nodes publish (their labels and tmc.dev annotations, read as
// the placement engine reads them), with the operator's rack pool sizes (--rack-pools, the
// chart's rackPools, as tmc-extender takes them). With --template-namespaces it also keeps, in
// each namespace those labels select (the chart's admission.tenantNamespaceLabels), one
// ResourceClaimTemplate per published TieredRecommendation that has a configuration, named as
// the recommendation, whose claim takes that configuration whole (dra.ClaimSpec). It runs as one replica: two would each write
// the same slices (the chart's Deployment has one, replaced with Recreate).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"tmc.dev/scheduler-plugin/pkg/dra"
	"tmc.dev/scheduler-plugin/pkg/drapublish"
	"tmc.dev/scheduler-plugin/pkg/tmc"
)

type options struct {
	kubeconfig  string
	rackPools   string
	templateNS  string
	debounce    time.Duration
	callTimeout time.Duration
	resync      time.Duration
	qps         float64
	burst       int
}

func main() {
	klog.InitFlags(nil)
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: the pod's service account)")
	flag.StringVar(&o.rackPools, "rack-pools", "",
		"the operator's rack pool sizes, name=quantity[,name=quantity...] (the chart's rackPools)")
	flag.StringVar(&o.templateNS, "template-namespaces", "",
		"a label selector (key=value[,key=value...]: the chart's admission.tenantNamespaceLabels) of the namespaces"+
			" to keep a ResourceClaimTemplate in per published recommendation; empty: no templates")
	flag.DurationVar(&o.debounce, "debounce", 2*time.Second, "how long a change waits for more before a pass")
	flag.DurationVar(&o.callTimeout, "call-timeout", 15*time.Second, "the bound on each API call")
	flag.DurationVar(&o.resync, "resync", 10*time.Minute, "how often every node and slice is looked at again")
	flag.Float64Var(&o.qps, "client-qps", 10, "API requests per second")
	flag.IntVar(&o.burst, "client-burst", 20, "API requests in a burst")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "tmc-dra-publisher")
		os.Exit(1)
	}
}

func parsePools(text string) (map[string]int64, error) {
	given := map[string]string{}
	for _, pair := range strings.Split(text, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, size, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("--rack-pools: %q is not name=quantity", pair)
		}
		given[name] = size
	}
	pools, err := tmc.ParseRackPools(given)
	if err != nil {
		return nil, fmt.Errorf("--rack-pools: %w", err)
	}
	return pools, nil
}

func run(ctx context.Context, o options) error {
	pools, err := parsePools(o.rackPools)
	if err != nil {
		return err
	}
	if _, _, err := drapublish.Desired(nil, pools, dra.Options{}); err != nil {
		return fmt.Errorf("--rack-pools: %w", err)
	}
	for name, d := range map[string]time.Duration{"--debounce": o.debounce, "--call-timeout": o.callTimeout, "--resync": o.resync} {
		if d <= 0 || d > time.Hour {
			return fmt.Errorf("%s must be in (0, 1h], not %s", name, d)
		}
	}
	var templateNS labels.Selector
	if o.templateNS != "" {
		if templateNS, err = labels.Parse(o.templateNS); err != nil {
			return fmt.Errorf("--template-namespaces: %w", err)
		}
		if templateNS.Empty() {
			return errors.New("--template-namespaces selects every namespace: name the tenant namespaces' labels")
		}
	}
	var config *rest.Config
	if o.kubeconfig != "" {
		config, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		config, err = rest.InClusterConfig()
	}
	if err != nil {
		return err
	}
	config.QPS, config.Burst = float32(o.qps), o.burst
	config.UserAgent = "tmc-dra-publisher"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	p := drapublish.New(client, dyn, drapublish.Config{
		Pools: pools, Options: dra.Options{},
		Debounce: o.debounce, CallTimeout: o.callTimeout, Resync: o.resync,
		TemplateNamespaces: templateNS,
	})
	return p.Run(ctx)
}
