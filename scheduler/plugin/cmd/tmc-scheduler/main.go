// Command tmc-scheduler is kube-scheduler with the tmc placement plugin registered: a profile
// that enables TmcPlacement (deploy/helm/tmc/files/plugin-scheduler-config.yaml) places opted-in
// pods on tiered-memory nodes without a scheduler extender. TmcNodeResourcesFit is the in-tree
// NodeResourcesFit without the cost of skipping the opt-in resource on every node
// (tmc.ResourcesFit); the chart's profile runs it in NodeResourcesFit's place.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"tmc.dev/scheduler-plugin/pkg/tmc"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(tmc.Name, tmc.New),
		app.WithPlugin(tmc.ResourcesFitName, tmc.NewResourcesFit),
	)
	os.Exit(cli.Run(command))
}
