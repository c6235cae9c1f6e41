// Command tmc-dra-slices prints the ResourceSlices tmc's node component would publish for the
// nodes it is given: their capacity as JSON on standard input, a List of ResourceSlices
// (resource.k8s.io/v1) as JSON on standard output.
//
//	{"nodes": [{"name": "node-a", "capacity": {"dram_bytes": 25769803776, "llc_ways": 48, ...}}],
//	 "rack_pools": {"rack-a": 274877906944}, "generation": 1}
//
// capacity is v1alpha1.NodeCapacity (the node's published capacity); rack_pools the operator's
// pool sizes in bytes (the chart's rackPools). Unknown fields and input over 1 MiB are refused.
//
// With --claim it prints instead the claim spec (resource.k8s.io/v1 ResourceClaimSpec) that takes
// one of the alternatives it is given, whole, the first that fits (dra.ClaimSpec):
//
//	{"alternatives": [{"llc_ways": 12, "dram_bytes": 4294967296, "slow_bytes": 1073741824}, ...]}
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
	"tmc.dev/scheduler-plugin/pkg/dra"
)

const maxInput = 1 << 20

type input struct {
	Nodes []struct {
		Name     string                `json:"name"`
		Capacity v1alpha1.NodeCapacity `json:"capacity"`
	} `json:"nodes"`
	RackPools  map[string]int64 `json:"rack_pools"`
	Generation int64            `json:"generation"`
}

type claimInput struct {
	Alternatives []dra.Alternative `json:"alternatives"`
}

func main() {
	do := run
	if len(os.Args) == 2 && os.Args[1] == "--claim" {
		do = claim
	} else if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: tmc-dra-slices [--claim] < input.json")
		os.Exit(2)
	}
	if err := do(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tmc-dra-slices:", err)
		os.Exit(1)
	}
}

// decode reads the bounded input into v, refusing unknown fields.
func decode(in io.Reader, v any) error {
	raw, err := io.ReadAll(io.LimitReader(in, maxInput+1))
	if err != nil {
		return err
	}
	if len(raw) > maxInput {
		return fmt.Errorf("input is larger than %d bytes", maxInput)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("input: %w", err)
	}
	return nil
}

func claim(in io.Reader, out io.Writer) error {
	var given claimInput
	if err := decode(in, &given); err != nil {
		return err
	}
	spec, err := dra.ClaimSpec(given.Alternatives)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(spec)
}

func run(in io.Reader, out io.Writer) error {
	var given input
	if err := decode(in, &given); err != nil {
		return err
	}
	nodes := make([]dra.Node, len(given.Nodes))
	for i, n := range given.Nodes {
		nodes[i] = dra.Node{Name: n.Name, Capacity: n.Capacity}
	}
	slices, err := dra.ClusterSlices(nodes, given.RackPools, dra.Options{Generation: given.Generation})
	if err != nil {
		return err
	}
	items := make([]any, len(slices))
	for i := range slices {
		items[i] = slices[i]
	}
	enc := json.NewEncoder(out)
	return enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
}
