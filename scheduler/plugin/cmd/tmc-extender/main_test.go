package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"tmc.dev/scheduler-plugin/pkg/tmc"
)

func TestPlacementFenceFromFlags(t *testing.T) {
	base := options{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	client := fake.NewSimpleClientset()
	ctx := context.Background()

	fence, err := placementFence(ctx, client, base)
	if err != nil || fence != nil {
		t.Fatalf("no --placement-lease: want no fence, got %v, %v", fence, err)
	}

	good := base
	good.placementLease = "tmc-system/tmc-scheduler-placement"
	if fence, err = placementFence(ctx, client, good); err != nil || fence == nil {
		t.Fatalf("a valid lease: want a fence, got %v, %v", fence, err)
	}

	for name, change := range map[string]func(*options){
		"not namespace/name":        func(o *options) { o.placementLease = "just-a-name" },
		"not a DNS name":            func(o *options) { o.placementLease = "ns/Not_A_Name" },
		"a fraction of a second":    func(o *options) { o.leaseDuration = 1500 * time.Millisecond },
		"zero retry":                func(o *options) { o.retryPeriod = 0 },
		"renew deadline past lease": func(o *options) { o.renewDeadline = 20 * time.Second },
		"retry past renew deadline": func(o *options) { o.retryPeriod = 10 * time.Second },
		"a lease longer than 300 s": func(o *options) { o.leaseDuration = 301 * time.Second },
		"a negative renew deadline": func(o *options) { o.renewDeadline = -time.Second },
	} {
		o := good
		change(&o)
		if _, err := placementFence(ctx, client, o); err == nil || !strings.Contains(err.Error(), "placement") {
			t.Errorf("%s: want an error naming the placement lease flags, got %v", name, err)
		}
	}
}

func TestTheProfilerIsServedOnlyWhereAsked(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	address, err := serveProfiler(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + address + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("the goroutine profile: %d %.200s", resp.StatusCode, body)
	}
	if _, err := serveProfiler(ctx, "not an address"); err == nil {
		t.Fatal("a bad address accepted")
	}
}

// pemFile writes one PEM block to dir/name.
func pemFile(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// signed is a P-256 certificate for cn signed by ca (self-signed when ca is nil), and its key.
func signed(t *testing.T, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	parent, signer := tmpl, key
	if ca == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, der
}

// kube-scheduler's extender client is an http.Transport set up by apimachinery's
// SetTransportDefaults, which configures HTTP/2: the verbs' TLS listener offers it, so a burst
// of concurrent calls (binds in flight beside filter) shares one connection and one handshake
// instead of opening a connection per call beyond the two idle ones HTTP/1.1 keeps. A client
// that speaks only HTTP/1.1 is still served.
func TestTheVerbsAreServedOverHTTP2OnOneConnection(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caDER := signed(t, "tmc-ca", nil, nil, x509.ExtKeyUsageAny)
	_, serverKey, serverDER := signed(t, "tmc-extender", ca, caKey, x509.ExtKeyUsageServerAuth)
	_, clientKey, clientDER := signed(t, "tmc-scheduler", ca, caKey, x509.ExtKeyUsageClientAuth)
	_, otherKey, otherDER := signed(t, "someone-else", ca, caKey, x509.ExtKeyUsageClientAuth)
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	o := options{
		listen:       "127.0.0.1:0",
		certFile:     pemFile(t, dir, "tls.crt", "CERTIFICATE", serverDER),
		keyFile:      pemFile(t, dir, "tls.key", "EC PRIVATE KEY", keyDER(serverKey)),
		clientCAFile: pemFile(t, dir, "ca.crt", "CERTIFICATE", caDER),
	}
	// The extender's own handler, behind a recorder of each call's protocol that holds the
	// calls a moment, so that they overlap as binds in flight do.
	engine := tmc.NewEngine(fake.NewSimpleClientset(), nil, 0)
	nodes := corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	verbs := tmc.NewExtender(engine, nil, nodes, tmc.ExtenderOptions{
		RequireClientCert: true, ClientNames: []string{"tmc-scheduler"},
	}).Handler("/scheduler")
	var protos sync.Map
	server, listener, err := listen(o, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		time.Sleep(20 * time.Millisecond)
		verbs.ServeHTTP(w, r)
	}))
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	server.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	go func() { _ = server.Serve(listener) }()
	defer server.Close()

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	clientCert := tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}
	url := "https://" + listener.Addr().String() + "/scheduler/filter"
	calls := func(tr *http.Transport, n int, want int) {
		t.Helper()
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(url, "application/json", strings.NewReader(`{"Pod":null,"NodeNames":[]}`))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					errs <- fmt.Errorf("status %d, want %d", resp.StatusCode, want)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}

	// As kube-scheduler builds its extender transport (pkg/scheduler/extender.go).
	scheduler := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12,
	}})
	calls(scheduler, 1, http.StatusOK) // the first call opens the connection
	calls(scheduler, 16, http.StatusOK)
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Fatalf("kube-scheduler's transport did not speak HTTP/2: %v", keys(&protos))
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("17 calls, 16 of them at once, opened %d connections; want 1", n)
	}

	// A client of HTTP/1.1 alone (no ALPN) is served as before.
	plain := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12,
	}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	calls(plain, 2, http.StatusOK)
	if _, ok := protos.Load("HTTP/1.1"); !ok {
		t.Fatalf("an HTTP/1.1 client was not served over HTTP/1.1: %v", keys(&protos))
	}

	// Over HTTP/2 as over HTTP/1.1, a certificate of the same CA for another name is refused.
	other := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{{Certificate: [][]byte{otherDER}, PrivateKey: otherKey}},
		MinVersion: tls.VersionTLS12,
	}})
	calls(other, 3, http.StatusUnauthorized)
}

func keys(m *sync.Map) []any {
	var out []any
	m.Range(func(k, _ any) bool { out = append(out, k); return true })
	return out
}

// --tenant-namespace-labels is checked before anything starts: a selector tmc could not apply
// as the policies do is an error that names the flag.
func TestTenantNamespaceLabelsFlagIsChecked(t *testing.T) {
	for _, bad := range []string{"novalue", "a=b,a=c", "not a key=x", "k=not a value"} {
		err := run(options{maxBodyBytes: 1 << 20, tenantNamespaces: bad})
		if err == nil || !strings.Contains(err.Error(), "--tenant-namespace-labels") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// A good selector passes the check (and stops later, at the missing TLS flags).
	err := run(options{maxBodyBytes: 1 << 20, tenantNamespaces: "tmc.dev/tenant=yes"})
	if err == nil || strings.Contains(err.Error(), "--tenant-namespace-labels") {
		t.Errorf("a good selector: %v", err)
	}
}
