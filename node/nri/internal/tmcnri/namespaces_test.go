package tmcnri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// fixedNamespaces are namespaces' labels as an informer would hold them once synced.
type fixedNamespaces struct {
	synced bool
	labels map[string]map[string]string
}

func (n *fixedNamespaces) Labels(ns string) (map[string]string, bool) {
	l, ok := n.labels[ns]
	return l, ok
}
func (n *fixedNamespaces) Synced() bool { return n.synced }

func tenantFixture(t *testing.T, namespaces *fixedNamespaces) *fixture {
	t.Helper()
	f := newFixture(t, true)
	tenants, err := v1alpha1.ParseTenantNamespaceLabels("tmc.dev/tenant=yes")
	must(t, err)
	f.plugin.cfg.Tenants, f.plugin.cfg.Namespaces = tenants, namespaces
	return f
}

func podIn(ns, name, uid string, ann map[string]string) *api.PodSandbox {
	p := pod(name, uid, ann)
	p.Namespace = ns
	return p
}

// A placement outside tmc's tenant namespaces was checked by no admission policy: the container
// is created without it, nothing is recorded or held for it, and the node says so.
func TestAPlacementOutsideTenantNamespacesIsNotApplied(t *testing.T) {
	f := tenantFixture(t, &fixedNamespaces{synced: true, labels: map[string]map[string]string{
		"tenant-a": {"tmc.dev/tenant": "yes"}, "other": {"team": "x"},
	}})
	ctx := context.Background()
	forged := podIn("other", "forged", "uf", placed("node-a", "0xf0", 4, gib, 0))
	adj, upd, err := f.plugin.CreateContainer(ctx, forged, container("c", "0-1"))
	if adj != nil || upd != nil || err != nil {
		t.Fatalf("a placement outside the tenant namespaces was applied: %v %v %v", adj, upd, err)
	}
	if f.rec.outcomes[OutcomeForeign] != 1 || f.rec.reasons() != "TmcPlacementIgnored" ||
		!strings.Contains(f.rec.events[0].message, "namespace other is not one of tmc's tenant namespaces (labelled tmc.dev/tenant=yes)") {
		t.Fatalf("outcomes %v events %v", f.rec.outcomes, f.rec.events)
	}
	if _, err := os.Stat(filepath.Join(f.resctrl, GroupPrefix+"uf")); !os.IsNotExist(err) {
		t.Error("the ignored pod got a resctrl group")
	}
	if _, ok := f.plugin.readRecord("uf", "c"); ok {
		t.Error("the ignored pod has a record")
	}
	// Its ways are not held: a tenant's pod placed on them is admitted.
	mine := podIn("tenant-a", "mine", "um", placed("node-a", "0xf0", 4, gib, 0))
	if adj, _, err := f.plugin.CreateContainer(ctx, mine, container("c", "0-1")); err != nil || adj == nil {
		t.Fatalf("the tenant's pod: %v %v", adj, err)
	}
	// Synchronize (a restart) holds the tenant's pod and not the other.
	g := New(f.plugin.cfg, f.rec, f.rec)
	cf, cm := container("c", "0-1"), container("c", "0-1")
	cf.Id, cf.PodSandboxId, cf.State = "c-f", forged.Id, api.ContainerState_CONTAINER_RUNNING
	cm.Id, cm.PodSandboxId, cm.State = "c-m", mine.Id, api.ContainerState_CONTAINER_RUNNING
	if _, err := g.Synchronize(ctx, []*api.PodSandbox{forged, mine}, []*api.Container{cf, cm}); err != nil {
		t.Fatal(err)
	}
	if _, held := g.pods["uf"]; held {
		t.Error("Synchronize holds the ignored pod's ways")
	}
	if _, held := g.pods["um"]; !held {
		t.Error("Synchronize forgot the tenant's pod")
	}
}

// Until the namespaces are listed (or for a namespace not seen yet), a placed container is
// refused: nothing is applied, or ignored, on a guess, and the kubelet creates it again.
func TestPlacedContainersAreRefusedUntilTheNamespacesAreKnown(t *testing.T) {
	namespaces := &fixedNamespaces{labels: map[string]map[string]string{"tenant-a": {"tmc.dev/tenant": "yes"}}}
	f := tenantFixture(t, namespaces)
	ctx := context.Background()
	mine := podIn("tenant-a", "mine", "um", placed("node-a", "0xf0", 4, gib, 0))
	_, _, err := f.plugin.CreateContainer(ctx, mine, container("c", "0-1"))
	if err == nil || !strings.Contains(err.Error(), "does not know tmc's tenant namespaces yet") {
		t.Fatalf("before the namespaces synced: %v", err)
	}
	namespaces.synced = true
	_, _, err = f.plugin.CreateContainer(ctx, podIn("new-ns", "p", "un", placed("node-a", "0x1", 1, gib, 0)), container("c", "0-1"))
	if err == nil {
		t.Fatal("a namespace not seen yet: admitted")
	}
	if adj, _, err := f.plugin.CreateContainer(ctx, mine, container("c", "0-1")); err != nil || adj == nil {
		t.Fatalf("once synced: %v %v", adj, err)
	}
	if f.rec.outcomes[OutcomeRefused] != 2 || f.rec.outcomes[OutcomeAdjusted] != 1 {
		t.Errorf("outcomes %v", f.rec.outcomes)
	}
	// A pod tmc did not place is never refused, whatever the namespaces.
	namespaces.synced = false
	if adj, _, err := f.plugin.CreateContainer(ctx, podIn("x", "plain", "up", nil), container("c", "")); adj != nil || err != nil {
		t.Fatalf("an unplaced pod: %v %v", adj, err)
	}
}

// The informer the binary runs: labels as the API server holds them, synced once listed.
func TestWatchNamespacesFollowsTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "tenant-a", Labels: map[string]string{"tmc.dev/tenant": "yes"}}})
	ns, err := WatchNamespaces(client, ctx.Done())
	must(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for !ns.Synced() {
		if time.Now().After(deadline) {
			t.Fatal("never synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l, ok := ns.Labels("tenant-a"); !ok || l["tmc.dev/tenant"] != "yes" {
		t.Fatalf("tenant-a: %v %v", l, ok)
	}
	if _, ok := ns.Labels("missing"); ok {
		t.Fatal("a missing namespace is known")
	}
}
