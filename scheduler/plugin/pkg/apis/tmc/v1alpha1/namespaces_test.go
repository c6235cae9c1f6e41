package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
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

// The selector texts every reader shares (scheduler/conformance/tenant_selectors.json): the Go
// parser concludes what the table says, as the publisher's does.
func TestTenantSelectorsAsTheSharedTableSays(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "..", "conformance", "tenant_selectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []struct {
			Text     string  `json:"text"`
			Selector *string `json:"selector"`
			Error    string  `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Cases) == 0 {
		t.Fatalf("the table: %v", err)
	}
	for _, c := range table.Cases {
		got, err := ParseTenantNamespaceLabels(c.Text)
		switch {
		case c.Selector != nil && err != nil:
			t.Errorf("%.40q: refused (%v), want %q", c.Text, err, *c.Selector)
		case c.Selector != nil && got.String() != *c.Selector:
			t.Errorf("%.40q: read as %q, want %q", c.Text, got.String(), *c.Selector)
		case c.Selector == nil && err == nil:
			t.Errorf("%.40q: accepted as %q, want an error with %q", c.Text, got.String(), c.Error)
		case c.Selector == nil && !strings.Contains(err.Error(), c.Error):
			t.Errorf("%.40q: %v, want it to say %q", c.Text, err, c.Error)
		}
	}
}
