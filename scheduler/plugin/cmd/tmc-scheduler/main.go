// Command tmc-scheduler is kube-scheduler with the tmc placement plugin registered: a profile
// that enables TmcPlacement (deploy/helm/tmc/files/plugin-scheduler-config.yaml) places opted-in
// pods on tiered-memory nodes without a scheduler extender.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"tmc.dev/scheduler-plugin/pkg/tmc"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(tmc.Name, tmc.New))
	os.Exit(cli.Run(command))
}
