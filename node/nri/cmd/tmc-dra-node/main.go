// tmc-dra-node is tmc's DRA node plugin for the driver tmc.dev: it registers with the kubelet,
// which asks it to prepare a pod's tmc.dev claims before creating the pod's containers (the
// claim's ways become a run of ways on this node, kept in a checkpoint with its memory, and a
// CDI device names the claim to the containers) and to unprepare them when the pod is gone.
// tmc-nri applies a prepared claim when each container is created.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"tmc.dev/node-nri/internal/tmcdra"
	"tmc.dev/node-nri/internal/tmcnri"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	var (
		node       = flag.String("node", env("TMC_DRA_NODE_NAME", ""), "this node's name (TMC_DRA_NODE_NAME)")
		kubelet    = flag.String("kubelet-dir", env("TMC_DRA_KUBELET_DIR", "/var/lib/kubelet"), "the kubelet's root directory: its plugins_registry and plugins/tmc.dev (TMC_DRA_KUBELET_DIR)")
		cdiDir     = flag.String("cdi-dir", env("TMC_DRA_CDI_DIR", "/var/run/cdi"), "a directory the runtime reads CDI specs from (TMC_DRA_CDI_DIR)")
		resctrl    = flag.String("resctrl", env("TMC_DRA_RESCTRL", "/sys/fs/resctrl"), "the host's resctrl mount (TMC_DRA_RESCTRL)")
		ways       = flag.Int("ways", 0, "the node's LLC way count when it has no L3 CAT (what its slice publishes); with CAT, 0 or cbm_mask's")
		kubeconfig = flag.String("kubeconfig", env("TMC_DRA_KUBECONFIG", ""), "kubeconfig to read claims with; in-cluster when empty (TMC_DRA_KUBECONFIG)")
	)
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if *node == "" {
		log.Error("no node name: set TMC_DRA_NODE_NAME (downward API spec.nodeName) or --node")
		os.Exit(2)
	}
	dataDir := filepath.Join(*kubelet, "plugins", dra.DriverName)
	registry := filepath.Join(*kubelet, "plugins_registry")
	for _, d := range []string{dataDir, registry} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			log.Error("cannot make the plugin's directories", "dir", d, "error", err)
			os.Exit(1)
		}
	}
	driver, err := tmcdra.New(tmcdra.Config{
		NodeName: *node, DataDir: dataDir, CDIDir: *cdiDir, Resctrl: &tmcnri.Resctrl{Root: *resctrl}, Ways: *ways,
	})
	if err != nil {
		log.Error("cannot start", "error", err)
		os.Exit(2)
	}
	driver.OnError = func(err error, msg string) { log.Warn(msg, "error", err) }
	var cfg *rest.Config
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		log.Error("no API server", "error", err)
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error("no API server", "error", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(dra.DriverName),
		kubeletplugin.NodeName(*node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrarDirectoryPath(registry),
	)
	if err != nil {
		log.Error("cannot register with the kubelet", "error", err)
		os.Exit(1)
	}
	log.Info("serving; waiting for the kubelet to register the plugin", "driver", dra.DriverName, "node", *node, "registry", registry)
	go func() {
		// The kubelet tells the plugin when it has registered it (or why not).
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if st := helper.RegistrationStatus(); st != nil {
				if st.PluginRegistered {
					log.Info("registered with the kubelet", "driver", dra.DriverName)
				} else {
					log.Error("the kubelet refused the plugin", "error", st.Error)
				}
				return
			}
		}
	}()
	<-ctx.Done()
	helper.Stop()
}
