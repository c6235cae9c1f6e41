// Command contract-schema turns the CRD controller-gen writes for the contract's document type
// (pkg/apis/tmc/contract) into a JSON Schema: one property per shape tmc keeps in object
// metadata, each the OpenAPI v3 schema (a JSON Schema dialect) of its Go type, with the
// TieredRecommendation's spec beside them, read from its own generated CRD, and the engine's
// fallback reason codes (x-tmc-fallback-reasons), the data other languages count fallbacks by.
//
// Usage: contract-schema CONTRACT_CRD.yaml RECOMMENDATION_CRD.yaml > contract.schema.json
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

type crd struct {
	Spec struct {
		Versions []struct {
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

func properties(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c crd
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.Spec.Versions) != 1 {
		return nil, fmt.Errorf("%s: expected one version, found %d", path, len(c.Spec.Versions))
	}
	props, ok := c.Spec.Versions[0].Schema.OpenAPIV3Schema["properties"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: the schema has no properties", path)
	}
	return props, nil
}

func run(contractCRD, recommendationCRD string) error {
	shapes, err := properties(contractCRD)
	if err != nil {
		return err
	}
	recommendation, err := properties(recommendationCRD)
	if err != nil {
		return err
	}
	defs := map[string]any{}
	for name, key := range map[string]string{
		"Placement": "placement", "NodeCapacity": "nodeCapacity", "NodePattern": "nodePattern",
		"Recommendation": "recommendation",
	} {
		shape, ok := shapes[key]
		if !ok {
			return fmt.Errorf("%s: no property %q", contractCRD, key)
		}
		defs[name] = shape
	}
	defs["TieredRecommendationSpec"] = recommendation["spec"]
	defs["TieredRecommendationStatus"] = recommendation["status"]
	doc := map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"$comment": "Generated from scheduler/plugin/pkg/apis/tmc/v1alpha1 by scheduler/plugin/generate.sh; " +
			"do not edit. OpenAPI v3 keywords (x-kubernetes-*, nullable) are kept as Kubernetes reads them.",
		"$defs": defs,
		// A placement's fallback_reason is any CamelCase word (a newer engine may add codes);
		// these are the ones this engine writes, in the order it checks for them.
		"x-tmc-fallback-reasons": v1alpha1.FallbackReasons,
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", out)
	return err
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: contract-schema CONTRACT_CRD.yaml RECOMMENDATION_CRD.yaml")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "contract-schema:", err)
		os.Exit(1)
	}
}
