package tmc

import (
	"regexp"
	"strconv"
	"strings"
)

// objectiveText is model/objectives.py's strict form: a kind and, for slo and least-dram, a
// bounded percentage (at most 5 digits before the point and 6 after).
var objectiveText = regexp.MustCompile(`^(cheapest|slo|least-dram|least_dram)(?::([0-9]{1,5}(?:\.[0-9]{1,6})?)%)?$`)

// CanonicalObjective is the objective as model.objectives prints it (str(parse_objective)), so
// that `slo:5%` and `slo:5.000%` are one (workload, objective) pair: the publisher keys its
// objects the same way (scheduler.pods.canonical_objective; the shared cases are
// scheduler/conformance/objectives.json). ok is false for text that is not an objective, which is
// returned as written (its pod gets the fallback that says why).
func CanonicalObjective(text string) (string, bool) {
	m := objectiveText.FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		return text, false
	}
	kind, number := strings.ReplaceAll(m[1], "_", "-"), m[2]
	if kind == "cheapest" {
		if number != "" {
			return text, false
		}
		return kind, true
	}
	if number == "" {
		return text, false
	}
	value, err := strconv.ParseFloat(number, 64)
	if err != nil {
		return text, false
	}
	// As Python: the bound is a fraction (percent / 100), printed back as a fixed-point percent.
	bound := value / 100
	if bound > 100 {
		return text, false
	}
	percent := strings.TrimRight(strings.TrimRight(strconv.FormatFloat(bound*100, 'f', 6, 64), "0"), ".")
	return kind + ":" + percent + "%", true
}

// canonical is CanonicalObjective's text alone.
func canonical(text string) string {
	out, _ := CanonicalObjective(text)
	return out
}
