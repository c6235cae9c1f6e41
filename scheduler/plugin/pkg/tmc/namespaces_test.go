package tmc

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func namespace(name string, labels map[string]string) *v1.Namespace {
	return &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func tenantsOf(t *testing.T, labels map[string]string) *TenantNamespaces {
	t.Helper()
	tenants, err := NewTenantNamespaces(labels)
	if err != nil {
		t.Fatal(err)
	}
	return tenants
}

// A placement outside tmc's tenant namespaces was written by whoever could write the pod (the
// policy does not look there): the cache never counts it, counts it once an operator labels the
// namespace, and releases it when the label goes.
func TestPlacementsOutsideTenantNamespacesAreNotCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := tmcNode("b", 8, 32<<30, 0, 8, "", 0)
	placed := func(ns, name, mask string) *v1.Pod {
		pod := placedOnB(t, tieredPod(name, nil, "1", "1Gi"), mask)
		pod.Namespace, pod.UID = ns, types.UID("uid-"+ns+"-"+name)
		return pod
	}
	client := fake.NewClientset(node,
		namespace("tenant-a", map[string]string{"tmc.dev/tenant": "yes"}), namespace("elsewhere", nil),
		placed("tenant-a", "mine", "0x3"), placed("elsewhere", "forged", "0xc"))
	p := &TmcPlacement{Engine: &Engine{client: client, cache: NewCache()}}
	SetTenantNamespaces(p.Engine, tenantsOf(t, map[string]string{"tmc.dev/tenant": "yes"}))
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := p.Watch(factory); err != nil {
		t.Fatal(err)
	}
	if p.NamespacesSynced() {
		t.Fatal("the namespaces are synced before the informer started")
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if !p.NamespacesSynced() {
		t.Fatal("the namespace informer never synced")
	}
	capacity, _ := ParseNodeCapacity(node.Labels, node.Annotations)
	eventually := func(what string, mask uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			u := p.cache.Usage("b", capacity, 8)
			if u.UsedMask == mask {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: used mask %#x, want %#x", what, u.UsedMask, mask)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	eventually("only the tenant namespace's placement", 0x3)

	namespaces := client.CoreV1().Namespaces()
	labelled := namespace("elsewhere", map[string]string{"tmc.dev/tenant": "yes"})
	if _, err := namespaces.Update(ctx, labelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("a namespace labelled a tenant's", 0xf)
	if _, err := namespaces.Update(ctx, namespace("elsewhere", map[string]string{"tmc.dev/tenant": "no"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("a namespace no longer a tenant's", 0x3)
	if err := namespaces.Delete(ctx, "tenant-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("a namespace gone", 0)
}

// Without a selector every namespace is a tenant's and no namespace informer is started.
func TestEveryNamespaceWithoutASelector(t *testing.T) {
	e := &Engine{cache: NewCache()}
	SetTenantNamespaces(e, tenantsOf(t, nil))
	if !e.tenant("anything") || !e.NamespacesSynced() {
		t.Fatal("an empty selector must select every namespace")
	}
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := e.Watch(factory); err != nil {
		t.Fatal(err)
	}
	if e.namespaceLabels != nil {
		t.Fatal("a namespace informer without a selector")
	}
}

// A pod that asks for tmc from a namespace that is not a tenant's is refused for good (no node
// will take it there), with a message that says why and carries no format verb.
func TestAPodOutsideTenantNamespacesIsRefused(t *testing.T) {
	h := newHarness(t, tmcNode("n", 8, 32<<30, 0, 8, "", 0))
	SetTenantNamespaces(h.plugin.Engine, tenantsOf(t, map[string]string{"tmc.dev/tenant": "yes"}))
	labels := map[string]map[string]string{"tenant-a": {"tmc.dev/tenant": "yes"}, "other": {"team": "x"}}
	h.plugin.namespaceLabels = func(ns string) (map[string]string, bool) {
		l, ok := labels[ns]
		return l, ok
	}
	ctx := context.Background()
	for _, ns := range []string{"other", "unknown"} {
		pod := tieredPod("outside-"+ns, nil, "1", "1Gi")
		pod.Namespace = ns
		_, st := h.plugin.PreFilter(ctx, framework.NewCycleState(), pod, nil)
		if st.Code() != fwk.UnschedulableAndUnresolvable {
			t.Fatalf("%s: %v", ns, st)
		}
		if msg := st.Message(); !strings.Contains(msg, "namespace "+ns+" is not one of tmc's tenant namespaces") ||
			!strings.Contains(msg, "tmc.dev/tenant=yes") || strings.Contains(msg, "%") {
			t.Fatalf("%s: %q", ns, msg)
		}
	}
	pod := tieredPod("inside", nil, "1", "1Gi")
	pod.Namespace = "tenant-a"
	if _, st := h.plugin.PreFilter(ctx, framework.NewCycleState(), pod, nil); !st.IsSuccess() {
		t.Fatalf("a pod of a tenant namespace: %v", st)
	}
	plain := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "other", UID: "plain"}}
	if _, st := h.plugin.PreFilter(ctx, framework.NewCycleState(), plain, nil); st.Code() != fwk.Skip {
		t.Fatalf("a pod that does not opt in, outside: %v", st)
	}
}

func TestTenantNamespaceLabelsArgument(t *testing.T) {
	for raw, ok := range map[string]bool{
		`{}`: true,
		`{"tenantNamespaceLabels": {"tmc.dev/tenant": "yes", "team": ""}}`: true,
		`{"tenantNamespaceLabels": {"not a key": "yes"}}`:                  false,
		`{"tenantNamespaceLabels": {"team": "a value with spaces"}}`:       false,
	} {
		args, err := decodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if _, err := NewTenantNamespaces(args.TenantNamespaceLabels); (err == nil) != ok {
			t.Errorf("%s: want ok=%v, got %v", raw, ok, err)
		}
	}
}
