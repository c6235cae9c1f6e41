package tmc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// extenderHarness is the extender over a fake API server whose Binding behaves as the real one.
type extenderHarness struct {
	t      *testing.T
	client *fake.Clientset
	engine *Engine
	ext    *Extender
}

func newExtenderHarness(t *testing.T, nodes ...*v1.Node) *extenderHarness {
	h := &extenderHarness{t: t, client: bindingClient()}
	h.engine = &Engine{client: h.client, cache: NewCache()}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		_ = indexer.Add(n)
		h.engine.ObserveNode(n)
	}
	// No pod lister: bind reads every pod from the API server.
	h.ext = NewExtender(h.engine, nil, corelisters.NewNodeLister(indexer), ExtenderOptions{})
	return h
}

func (h *extenderHarness) create(pod *v1.Pod) *v1.Pod {
	made, err := h.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return made
}

func (h *extenderHarness) bind(pod *v1.Pod, node string) string {
	args := &extenderv1.ExtenderBindingArgs{PodName: pod.Name, PodNamespace: pod.Namespace, PodUID: pod.UID, Node: node}
	return h.ext.Bind(context.Background(), args).Error
}

func (h *extenderHarness) get(name string) *v1.Pod {
	pod, err := h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pod
}

func twoNodes() []*v1.Node {
	return []*v1.Node{tmcNode("a", 8, 32<<30, 64<<30, 8, "", 0), tmcNode("b", 8, 32<<30, 64<<30, 8, "", 0)}
}

func TestExtenderRetriedBindOnTheSameAndOnAnotherNode(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	pod := h.create(tieredPod("p", nil, "1", "1Gi"))
	if e := h.bind(pod, "a"); e != "" {
		t.Fatal(e)
	}
	held, _ := h.engine.cache.Held(pod.UID)
	placed := h.get("p").Annotations[PlacementAnnotation]
	// The same bind again (kube-scheduler retried after a timeout): success, nothing changed.
	if e := h.bind(pod, "a"); e != "" {
		t.Fatalf("a retried bind to the same node: %s", e)
	}
	// A bind to another node: refused; the live reservation on a is kept, b holds nothing.
	if e := h.bind(pod, "b"); !strings.Contains(e, "already bound to a") {
		t.Fatalf("a bind to another node: %q", e)
	}
	again, ok := h.engine.cache.Held(pod.UID)
	if !ok || again.Node != "a" || again.LLCMask != held.LLCMask || !again.Bound || h.engine.cache.Len() != 1 {
		t.Fatalf("the reservation became %+v (was %+v)", again, held)
	}
	if got := h.get("p"); got.Spec.NodeName != "a" || got.Annotations[PlacementAnnotation] != placed {
		t.Fatalf("the pod was rewritten: %s %q", got.Spec.NodeName, got.Annotations[PlacementAnnotation])
	}
}

func TestExtenderParallelBindsToTwoNodesLeaveOneReservation(t *testing.T) {
	for round := 0; round < 20; round++ {
		h := newExtenderHarness(t, twoNodes()...)
		pod := h.create(tieredPod("p", nil, "1", "1Gi"))
		const n = 16
		errs := make([]string, n)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := 0; i < n; i++ {
			done.Add(1)
			go func(i int) {
				defer done.Done()
				start.Wait()
				errs[i] = h.bind(pod, []string{"a", "b"}[i%2])
			}(i)
		}
		start.Done()
		done.Wait()
		bound := h.get("p").Spec.NodeName
		if bound == "" {
			t.Fatalf("round %d: no attempt bound the pod: %v", round, errs)
		}
		held, ok := h.engine.cache.Held(pod.UID)
		if !ok || held.Node != bound || h.engine.cache.Len() != 1 {
			t.Fatalf("round %d: bound to %s, the cache holds %+v (%d reservations)", round, bound, held, h.engine.cache.Len())
		}
		other := map[string]string{"a": "b", "b": "a"}[bound]
		capacity, cpus, _ := nodeCapacity(tmcNode(other, 8, 32<<30, 64<<30, 8, "", 0))
		if u := h.engine.cache.Usage(other, capacity, cpus); u.UsedCPUs != 0 || u.UsedMask != 0 {
			t.Fatalf("round %d: node %s holds %+v", round, other, u)
		}
		for i, e := range errs {
			if i%2 == 0 == (bound == "a") && e != "" && !strings.Contains(e, "another attempt") {
				t.Fatalf("round %d: a bind to the winning node failed otherwise: %s", round, e)
			}
		}
	}
}

func TestExtenderAForgedFilterCopyCannotBindAPodThatNeverOptedIn(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	plain := tieredPod("plain", nil, "1", "1Gi")
	plain.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	stored := h.create(plain)
	// The filter carries a copy that claims to opt in, with a pinned recommendation.
	forged := stored.DeepCopy()
	forged.Spec.Containers[0].Resources = tieredPod("plain", nil, "1", "1Gi").Spec.Containers[0].Resources
	forged.Annotations = map[string]string{RecommendationAnnotation: `{"schema":"tmc.recommendation/v1","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":8,"slow_ratio":0.0,"plan":[]}`}
	names := []string{"a", "b"}
	if out := h.ext.Filter(&extenderv1.ExtenderArgs{Pod: forged, NodeNames: &names}); out.Error != "" {
		t.Fatal(out.Error)
	}
	if e := h.bind(stored, "a"); !strings.Contains(e, "does not request tiered memory") {
		t.Fatalf("bind of a pod that never opted in: %q", e)
	}
	if got := h.get("plain"); got.Spec.NodeName != "" || len(got.Annotations) != 0 || h.engine.cache.Len() != 0 {
		t.Fatalf("the pod was touched: %q %v; %d reservations", got.Spec.NodeName, got.Annotations, h.engine.cache.Len())
	}
	// A bind naming another pod's uid touches nothing either.
	tiered := h.create(tieredPod("tiered", nil, "1", "1Gi"))
	wrong := tiered.DeepCopy()
	wrong.UID = "someone-else"
	if e := h.bind(wrong, "a"); !strings.Contains(e, "is not the pod") {
		t.Fatalf("bind with another uid: %q", e)
	}
	if h.get("tiered").Spec.NodeName != "" || h.engine.cache.Len() != 0 {
		t.Fatal("a bind with another uid touched the pod")
	}
}

func TestExtenderAFailedBindingForgetsOnlyItsOwnReservation(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	pod := h.create(tieredPod("p", nil, "1", "1Gi"))
	// The pod is deleted and made again under its name: the Binding's uid precondition fails.
	if err := h.client.CoreV1().Pods("default").Delete(context.Background(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := tieredPod("p", nil, "1", "1Gi")
	again.UID = "uid-p-2"
	h.create(again)
	if e := h.bind(pod, "a"); e == "" {
		t.Fatal("a bind of a pod that is gone succeeded")
	}
	if h.engine.cache.Len() != 0 || h.get("p").Spec.NodeName != "" {
		t.Fatalf("%d reservations, the new pod bound to %q", h.engine.cache.Len(), h.get("p").Spec.NodeName)
	}
}

// The verbs over HTTPS: only a client certificate signed by the scheduler's CA, naming exactly
// one common name that may call them, gets an answer.

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

// client is a client certificate whose subject holds the common names given, in order.
func (ca *testCA) client(t *testing.T, names ...string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var subject pkix.Name
	for _, n := range names {
		subject.ExtraNames = append(subject.ExtraNames, pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: n})
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestExtenderVerbsNeedTheSchedulersClientCertificate(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	scheduler, other := newTestCA(t, "scheduler-ca"), newTestCA(t, "other-ca")
	ext := NewExtender(h.engine, nil, h.ext.nodes, ExtenderOptions{RequireClientCert: true, ClientNames: []string{"tmc-scheduler"}})
	srv := httptest.NewUnstartedServer(ext.Handler("/scheduler"))
	pool := x509.NewCertPool()
	pool.AddCert(scheduler.cert)
	srv.TLS = &tls.Config{ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	pod := tieredPod("p", nil, "1", "1Gi")
	names := []string{"a", "b"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	call := func(certs ...tls.Certificate) (int, string, error) {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = certs
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(srv.URL+"/scheduler/filter", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw), nil
	}
	if code, text, err := call(scheduler.client(t, "tmc-scheduler")); err != nil || code != 200 || !strings.Contains(text, `"NodeNames":["a","b"]`) {
		t.Fatalf("the scheduler's certificate: %d %s %v", code, text, err)
	}
	for what, certs := range map[string][]tls.Certificate{
		"no certificate":     nil,
		"another CN":         {scheduler.client(t, "someone-else")},
		"two CNs":            {scheduler.client(t, "someone-else", "tmc-scheduler")},
		"no CN":              {scheduler.client(t)},
		"another CA's":       {other.client(t, "tmc-scheduler")},
		"another CA, no CN?": {other.client(t, "someone-else")},
	} {
		code, text, err := call(certs...)
		if err == nil && (code != http.StatusUnauthorized || !strings.Contains(text, `"Error":"tmc:`)) {
			t.Errorf("%s: answered %d %s", what, code, text)
		}
	}
	// Plain HTTP to the TLS port gets no answer from the verbs.
	resp, err := http.Post(strings.Replace(srv.URL, "https://", "http://", 1)+"/scheduler/filter", "application/json", bytes.NewReader(body))
	if err == nil {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(raw), "NodeNames") {
			t.Fatalf("plain HTTP was answered: %d %s", resp.StatusCode, raw)
		}
	}
}

func TestExtenderAnswersInTheFormItWasAsked(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	pod := tieredPod("p", nil, "1", "1Gi")
	nodes := &v1.NodeList{Items: []v1.Node{*twoNodes()[0], *twoNodes()[1]}}
	out := h.ext.Filter(&extenderv1.ExtenderArgs{Pod: pod, Nodes: nodes})
	if out.NodeNames != nil || out.Nodes == nil || len(out.Nodes.Items) != 2 {
		t.Fatalf("Nodes asked, answered %+v", out)
	}
	// A body that is not an extender request is a 400 with Error, and an oversized one a 413.
	small := NewExtender(h.engine, nil, h.ext.nodes, ExtenderOptions{MaxBodyBytes: 1024}).Handler("/scheduler")
	for body, want := range map[string]int{"[1,2": 400, strings.Repeat(" ", 2048) + "{}": 413} {
		rec := httptest.NewRecorder()
		small.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/scheduler/filter", strings.NewReader(body)))
		if rec.Code != want || !strings.Contains(rec.Body.String(), `"Error":"tmc:`) {
			t.Errorf("%d-byte body: %d %s", len(body), rec.Code, rec.Body.String())
		}
	}
}

// The verbs' series are what the chart's alerts read (tmc_extender_*), on /metrics.
func TestExtenderMetrics(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	handler := h.ext.Handler("/scheduler")
	names := []string{"a", "b"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: tieredPod("p", nil, "1", "1Gi"), NodeNames: &names})
	for _, verb := range []string{"filter", "prioritize"} {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/scheduler/"+verb, bytes.NewReader(body)))
		if rec.Code != 200 {
			t.Fatalf("%s: %d", verb, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/scheduler/bind", strings.NewReader("{")))
	rec = httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`tmc_extender_requests_total{outcome="ok",verb="filter"} 1`,
		`tmc_extender_requests_total{outcome="ok",verb="prioritize"} 1`,
		`tmc_extender_requests_total{outcome="bad_request",verb="bind"} 1`,
		`tmc_extender_request_duration_seconds_count{verb="filter"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestExtenderTwentyParallelBindsOfOnePodLeaveOneReservation(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	pod := h.create(tieredPod("p", nil, "1", "1Gi"))
	const n = 20
	errs := make([]string, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := 0; i < n; i++ {
		done.Add(1)
		go func(i int) {
			defer done.Done()
			start.Wait()
			errs[i] = h.bind(pod, "a")
		}(i)
	}
	start.Done()
	done.Wait()
	held, ok := h.engine.cache.Held(pod.UID)
	if !ok || held.Node != "a" || !held.Bound || h.engine.cache.Len() != 1 {
		t.Fatalf("the cache holds %+v (%d reservations): %v", held, h.engine.cache.Len(), errs)
	}
	capacity, cpus, _ := nodeCapacity(tmcNode("a", 8, 32<<30, 64<<30, 8, "", 0))
	if u := h.engine.cache.Usage("a", capacity, cpus); u.UsedCPUs != 1 || u.UsedMask != held.LLCMask {
		t.Fatalf("node a counts %+v for one pod holding %#x", u, held.LLCMask)
	}
	for _, e := range errs {
		if e != "" && !strings.Contains(e, "another attempt") {
			t.Fatalf("a bind failed otherwise: %s", e)
		}
	}
}

func TestExtenderAForgedFilterCannotRewriteARunningPodsReservation(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	pod := h.create(tieredPod("p", nil, "1", "1Gi"))
	if e := h.bind(pod, "a"); e != "" {
		t.Fatal(e)
	}
	held, _ := h.engine.cache.Held(pod.UID)
	placed := h.get("p").Annotations[PlacementAnnotation]
	// The filter carries the running pod asking for every way and more CPUs; then a bind.
	forged := h.get("p").DeepCopy()
	forged.Spec.NodeName = ""
	forged.Annotations[RecommendationAnnotation] = `{"schema":"tmc.recommendation/v1","dram_bytes":1073741824,"slow_bytes":0,"llc_ways":8,"slow_ratio":0.0,"plan":[]}`
	names := []string{"a", "b"}
	_ = h.ext.Filter(&extenderv1.ExtenderArgs{Pod: forged, NodeNames: &names})
	_ = h.bind(forged, "a")
	again, ok := h.engine.cache.Held(pod.UID)
	if !ok || again.LLCMask != held.LLCMask || again.Node != "a" || h.engine.cache.Len() != 1 {
		t.Fatalf("the reservation became %+v (was %+v)", again, held)
	}
	if got := h.get("p").Annotations[PlacementAnnotation]; got != placed {
		t.Fatalf("the placement was rewritten: %q", got)
	}
}

// Whatever body a verb is sent, it answers 200 with an error, 400 or 413: never a 5xx, never a
// hang.
func TestExtenderFuzzedBodiesNeverAnswer5xx(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	handler := h.ext.Handler("/scheduler")
	bodies := []string{
		"", "null", "{}", "[]", `{"Pod":null}`, `{"Pod":{}}`, `{"Pod":{"metadata":{"name":1}}}`,
		`{"Pod":{"spec":{"containers":[{"resources":{"requests":{"cpu":"1e400","tmc.dev/tiered":"1"}}}]}},"NodeNames":["a"]}`,
		`{"Pod":{"spec":{"containers":[{"resources":{"requests":{"memory":"99999999999999999999Ei","tmc.dev/tiered":"1"}}}]}},"NodeNames":["a","a","zz"]}`,
		`{"Pod":{"metadata":{"annotations":{"tmc.dev/recommendation":"{\"schema\":\"x\"}"}}},"NodeNames":null,"Nodes":{"items":[{}]}}`,
		`{"PodName":"","PodNamespace":"","PodUID":"","Node":""}`, `{"PodName":"x","PodNamespace":"default","PodUID":"u","Node":"nowhere"}`,
		`{"Pod":{},"Nodes":{"items":null}}`, strings.Repeat("[", 10000), `"` + strings.Repeat("a", 100000) + `"`,
	}
	for _, verb := range []string{"filter", "prioritize", "bind"} {
		for _, body := range bodies {
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() {
				defer close(done)
				handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/scheduler/"+verb, strings.NewReader(body)))
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s hung on %.60q", verb, body)
			}
			if rec.Code >= 500 {
				t.Errorf("%s %.60q: %d %s", verb, body, rec.Code, rec.Body.String())
			}
		}
	}
}

// kube-scheduler records an extender's texts as a plugin's (the event's format string, the
// condition as it is): a percent in an objective must read right in both, on Filter and Bind.
func TestExtenderTextsAreNoFormatStrings(t *testing.T) {
	h := newExtenderHarness(t, twoNodes()...)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.engine.published, h.engine.wait, h.engine.now = NewRecommendationIndex(), WaitUntilPublished, func() time.Time { return now }
	pod := h.create(tieredPod("p", map[string]string{WorkloadAnnotation: "graph500", ObjectiveAnnotation: "slo:5%"}, "1", "1Gi"))
	texts := map[string]string{
		"filter": h.ext.Filter(&extenderv1.ExtenderArgs{Pod: pod, NodeNames: &[]string{"a", "b"}}).Error,
		"bind":   h.bind(pod, "a"),
	}
	var none []any // as the event recorder calls it: the message, no arguments
	for verb, text := range texts {
		got := fmt.Sprintf(text, none...)
		if strings.Contains(got, "%") || !strings.Contains(got, `"slo:5 percent"`) {
			t.Errorf("%s: the event would read %q", verb, got)
		}
	}
}
