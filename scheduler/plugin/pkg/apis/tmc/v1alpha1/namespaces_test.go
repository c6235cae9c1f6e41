package v1alpha1

import (
	"strings"
	"testing"
)

func TestTenantNamespacesFromAFlag(t *testing.T) {
	every, err := ParseTenantNamespaceLabels(" ")
	if err != nil || !every.Every() || !every.Selects(nil) || every.String() != "" {
		t.Fatalf("an empty flag: %v, %v", every, err)
	}
	var none *TenantNamespaces
	if !none.Every() || !none.Selects(map[string]string{"a": "b"}) {
		t.Fatal("a nil selector must select every namespace")
	}
	two, err := ParseTenantNamespaceLabels("tmc.dev/tenant=yes, team=")
	if err != nil {
		t.Fatal(err)
	}
	if two.String() != "team=,tmc.dev/tenant=yes" {
		t.Errorf("String: %q", two.String())
	}
	for labels, want := range map[string]bool{
		"tmc.dev/tenant=yes,team=":        true,
		"tmc.dev/tenant=yes,team=,more=1": true,
		"tmc.dev/tenant=yes":              false, // every label, not one of them
		"tmc.dev/tenant=no,team=":         false,
		"":                                false,
	} {
		got := map[string]string{}
		for _, pair := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(pair, "="); ok {
				got[k] = v
			}
		}
		if two.Selects(got) != want {
			t.Errorf("namespace labelled %q: want %v", labels, want)
		}
	}
	for _, bad := range []string{
		"novalue", "a=b,a=c", "not a key=x", "k=not a value", "k=" + strings.Repeat("v", 64),
		strings.Repeat("k=v,", MaxTenantNamespaceLabels*100),
	} {
		if _, err := ParseTenantNamespaceLabels(bad); err == nil {
			t.Errorf("%.40q: accepted", bad)
		}
	}
	many := map[string]string{}
	for i := range MaxTenantNamespaceLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if _, err := NewTenantNamespaces(many); err == nil {
		t.Error("more labels than the bound: accepted")
	}
}
