// Package v1alpha1 is tmc's contract with Kubernetes, defined once: the TieredRecommendation
// custom resource the publisher writes and the scheduler reads, and the shapes tmc keeps in
// object metadata (a node's tiered capacity and machine pattern, a pod's placement). The CRD and
// the JSON Schema that model.node_contract is checked against are generated from these types
// (scheduler/plugin/generate.sh); the markers below are the contract's bounds.
//
// +kubebuilder:object:generate=true
// +groupName=tmc.dev
package v1alpha1
