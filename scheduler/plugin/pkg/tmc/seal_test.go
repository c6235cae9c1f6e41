package tmc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testSealKeys(t *testing.T) *SealKeys {
	t.Helper()
	keys, err := NewSealKeys(map[string][]byte{"k1": []byte(strings.Repeat("a test key, ", 4))}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// The Binding carries the placement's seal, made over the pod's UID, and a scheduler restarted
// with the same keys counts the bound pod from it.
func TestABindSealsThePlacementItWrites(t *testing.T) {
	node := tmcNode("b", 8, 32<<30, 0, 8, "", 0)
	h := newHarness(t, node)
	keys := testSealKeys(t)
	SetSealKeys(h.plugin.Engine, keys)
	if name, st := h.schedule(tieredPod("a", nil, "1", "1Gi")); !st.IsSuccess() || name != "b" {
		t.Fatalf("%q %v", name, st)
	}
	got, err := h.client.CoreV1().Pods("default").Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Verify(string(got.UID), got.Annotations); err != nil {
		t.Fatalf("the bound pod's seal: %v (annotations %v)", err, got.Annotations)
	}
	restarted := &Engine{cache: NewCache()}
	SetSealKeys(restarted, keys)
	restarted.ObserveNode(node)
	restarted.ObservePod(got)
	capacity, _ := ParseNodeCapacity(node.Labels, node.Annotations)
	if u := restarted.cache.Usage("b", capacity, 8); u.UsedMask == 0 {
		t.Error("a restarted scheduler does not count the pod it sealed")
	}
}

// With seals on, a bound pod's placement counts only when its seal verifies: one written by a
// Binding or a pod write of anyone else (no seal, another pod's seal, a placement changed after
// sealing) reserves nothing, and a counted pod whose placement is rewritten keeps what it held
// (its containers still use it) and gains nothing. With seals off every readable placement
// counts, as before.
func TestOnlySealedPlacementsAreCounted(t *testing.T) {
	node := tmcNode("b", 8, 32<<30, 0, 8, "", 0)
	capacity, _ := ParseNodeCapacity(node.Labels, node.Annotations)
	keys := testSealKeys(t)
	sealed := func(pod *v1.Pod) *v1.Pod {
		seal, err := keys.Seal(string(pod.UID), pod.Annotations)
		if err != nil {
			t.Fatal(err)
		}
		pod.Annotations[PlacementSealAnnotation] = seal
		return pod
	}
	e := &Engine{cache: NewCache()}
	SetSealKeys(e, keys)
	e.ObserveNode(node)
	used := func() uint64 { return e.cache.Usage("b", capacity, 8).UsedMask }

	e.ObservePod(placedOnB(t, tieredPod("forged", nil, "1", "1Gi"), "0x3"))
	if m := used(); m != 0 {
		t.Errorf("an unsealed placement is counted: used mask %#x", m)
	}
	other := sealed(placedOnB(t, tieredPod("other", nil, "1", "1Gi"), "0x3"))
	copied := placedOnB(t, tieredPod("copier", nil, "1", "1Gi"), "0x3")
	copied.Annotations[PlacementSealAnnotation] = other.Annotations[PlacementSealAnnotation]
	e.ObservePod(copied)
	if m := used(); m != 0 {
		t.Errorf("another pod's seal is taken: used mask %#x", m)
	}
	mine := sealed(placedOnB(t, tieredPod("mine", nil, "1", "1Gi"), "0xc"))
	e.ObservePod(mine)
	if m := used(); m != 0xc {
		t.Fatalf("a sealed placement: used mask %#x, want 0xc", m)
	}
	rewritten := placedOnB(t, tieredPod("mine", nil, "1", "1Gi"), "0x30")
	rewritten.Annotations[PlacementSealAnnotation] = mine.Annotations[PlacementSealAnnotation]
	e.ObservePod(rewritten)
	if m := used(); m != 0xc {
		t.Errorf("a placement changed after sealing: used mask %#x, want the sealed one's 0xc", m)
	}

	off := &Engine{cache: NewCache()}
	off.ObserveNode(node)
	off.ObservePod(placedOnB(t, tieredPod("plain", nil, "1", "1Gi"), "0x3"))
	if m := off.cache.Usage("b", capacity, 8).UsedMask; m != 0x3 {
		t.Errorf("seals off: an unsealed placement is not counted (used mask %#x)", m)
	}
}

// The plugin's arguments: the key directory and the signing key together, or neither.
func TestSealKeysNeedASigningKey(t *testing.T) {
	dir := t.TempDir()
	if k, err := LoadSealKeys("", ""); k != nil || err != nil {
		t.Fatalf("no directory: %v %v, want sealing off", k, err)
	}
	if _, err := LoadSealKeys(dir, ""); err == nil {
		t.Error("an empty key directory: accepted")
	}
	writeKey(t, dir, "k1", strings.Repeat("k", 40))
	if _, err := LoadSealKeys(dir, ""); err == nil || !strings.Contains(err.Error(), "signing key") {
		t.Errorf("keys without the signing key's id: %v", err)
	}
	if k, err := LoadSealKeys(dir, "k1"); err != nil || k.SigningKey() != "k1" {
		t.Errorf("keys with their signing key: %v", err)
	}
}

func writeKey(t *testing.T, dir, id, key string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, id), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
}
