package v1alpha1

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type sealTable struct {
	Keys  map[string]string `json:"keys"`
	Seals []struct {
		PodUID      string            `json:"pod_uid"`
		Key         string            `json:"key"`
		Annotations map[string]string `json:"annotations"`
		Seal        string            `json:"seal"`
	} `json:"seals"`
	Verdicts []struct {
		Case        string            `json:"case"`
		PodUID      string            `json:"pod_uid"`
		Annotations map[string]string `json:"annotations"`
		Verified    bool              `json:"verified"`
		Error       string            `json:"error"`
	} `json:"verdicts"`
}

func readSealTable(t *testing.T) sealTable {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "..", "conformance", "placement_seals.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table sealTable
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Seals) == 0 || len(table.Verdicts) == 0 {
		t.Fatalf("the table: %v", err)
	}
	return table
}

func tableKeys(t *testing.T, table sealTable, signing string) *SealKeys {
	t.Helper()
	keys := map[string][]byte{}
	for id, k := range table.Keys {
		keys[id] = []byte(k)
	}
	k, err := NewSealKeys(keys, signing)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The seals every side shares (scheduler/conformance/placement_seals.json): the engine writes
// what the table says, and concludes of each pod's annotations what the publisher does.
func TestPlacementSealsAsTheSharedTableSays(t *testing.T) {
	table := readSealTable(t)
	for _, c := range table.Seals {
		got, err := tableKeys(t, table, c.Key).Seal(c.PodUID, c.Annotations)
		if err != nil || got != c.Seal {
			t.Errorf("sealed with %s: %q (%v), want %q", c.Key, got, err, c.Seal)
		}
	}
	keys := tableKeys(t, table, "")
	for _, c := range table.Verdicts {
		err := keys.Verify(c.PodUID, c.Annotations)
		var bad *SealError
		switch {
		case c.Verified && err != nil:
			t.Errorf("%s: refused (%v)", c.Case, err)
		case !c.Verified && err == nil:
			t.Errorf("%s: verified, want an error with %q", c.Case, c.Error)
		case !c.Verified && (!errors.As(err, &bad) || !strings.Contains(err.Error(), c.Error)):
			t.Errorf("%s: %v, want a SealError saying %q", c.Case, err, c.Error)
		}
	}
}

// Sealing off (no keys) seals nothing and verifies everything, as before seals existed.
func TestNoKeysSealNothingAndVerifyEverything(t *testing.T) {
	var keys *SealKeys
	if s, err := keys.Seal("uid", map[string]string{PlacementAnnotation: "{}"}); s != "" || err != nil {
		t.Errorf("sealed %q (%v) without keys", s, err)
	}
	if err := keys.Verify("uid", map[string]string{PlacementAnnotation: "{}"}); err != nil {
		t.Errorf("refused without keys: %v", err)
	}
	if k, err := LoadSealKeys("", ""); k != nil || err != nil {
		t.Errorf("no directory: %v, %v; want sealing off", k, err)
	}
	if _, err := LoadSealKeys("", "k1"); err == nil {
		t.Error("a signing key without a directory: accepted")
	}
}

// A key directory as a mounted Secret lays it out: the keys are links into a ..data directory
// the kubelet swaps, and a key written with a trailing newline is the same key.
func secretVolume(t *testing.T, keys map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_12_03_20_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for id, key := range keys {
		if err := os.WriteFile(filepath.Join(data, id), []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", id), filepath.Join(dir, id)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestKeysReadFromASecretVolume(t *testing.T) {
	table := readSealTable(t)
	dir := secretVolume(t, map[string]string{"k1": table.Keys["k1"] + "\n"})
	keys, err := LoadSealKeys(dir, "k1")
	if err != nil {
		t.Fatal(err)
	}
	c := table.Seals[0]
	if got, _ := keys.Seal(c.PodUID, c.Annotations); got != c.Seal {
		t.Errorf("sealed %q, want %q (the key read less its newline)", got, c.Seal)
	}
	if ids := keys.KeyIDs(); len(ids) != 1 || ids[0] != "k1" {
		t.Errorf("keys %v, want [k1]: the volume's own entries are not keys", ids)
	}
}

func TestKeyDirectoriesThatAreRefused(t *testing.T) {
	long := strings.Repeat("k", MinSealKeyBytes)
	for name, keys := range map[string]map[string]string{
		"empty":         {},
		"a short key":   {"k1": "short"},
		"a bad key id":  {"Key_1": long},
		"a too long id": {strings.Repeat("k", 64): long},
	} {
		if _, err := LoadSealKeys(secretVolume(t, keys), ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	many := map[string]string{}
	for i := 0; i <= MaxSealKeys; i++ {
		many["k"+strings.Repeat("x", i)] = long
	}
	if _, err := LoadSealKeys(secretVolume(t, many), ""); err == nil {
		t.Error("more keys than the bound: accepted")
	}
	if _, err := LoadSealKeys(secretVolume(t, map[string]string{"k1": long}), "k2"); err == nil {
		t.Error("a signing key the directory lacks: accepted")
	}
	if _, err := LoadSealKeys(filepath.Join(t.TempDir(), "absent"), ""); err == nil {
		t.Error("a missing directory: accepted")
	}
}

// A key added to the Secret is verified without a restart: a seal naming a key not held
// re-reads the directory, at most every sealReloadInterval; a directory that cannot be read
// then keeps the keys it held.
func TestAKeyRotatedInIsReadWhenASealNamesIt(t *testing.T) {
	table := readSealTable(t)
	dir := secretVolume(t, map[string]string{"k1": table.Keys["k1"]})
	keys, err := LoadSealKeys(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1_800_000_000, 0)
	keys.now = func() time.Time { return clock }
	keys.loaded.Store(clock.UnixNano())
	var rotated = table.Verdicts[1] // sealed with k2
	if rotated.PodUID == "" || !strings.Contains(rotated.Annotations[PlacementSealAnnotation], ":k2:") {
		t.Fatalf("the table's second verdict is not k2's: %+v", rotated)
	}
	if err := os.WriteFile(filepath.Join(dir, "k2"), []byte(table.Keys["k2"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := keys.Verify(rotated.PodUID, rotated.Annotations); err == nil {
		t.Error("verified before the reload interval passed")
	}
	clock = clock.Add(sealReloadInterval)
	if err := keys.Verify(rotated.PodUID, rotated.Annotations); err != nil {
		t.Errorf("after the interval: %v", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * sealReloadInterval)
	unknown := map[string]string{PlacementSealAnnotation: "v1:k9:AAAA"}
	_ = keys.Verify("uid", unknown) // a reload that fails
	if err := keys.Verify(rotated.PodUID, rotated.Annotations); err != nil {
		t.Errorf("a failed reload dropped the keys: %v", err)
	}
}

// Verify never panics, whatever the annotations hold.
func FuzzVerifyNeverPanics(f *testing.F) {
	f.Add("uid", "{}", "0x1", "v1:k1:AAAA")
	f.Add("", "", "", "::")
	f.Add("u", "p", "", "v1:k1:"+strings.Repeat("A", 300))
	keys, err := NewSealKeys(map[string][]byte{"k1": []byte(strings.Repeat("s", 40))}, "k1")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, uid, placement, mask, seal string) {
		ann := map[string]string{PlacementAnnotation: placement, LLCMaskAnnotation: mask, PlacementSealAnnotation: seal}
		_ = keys.Verify(uid, ann)
		own, err := keys.Seal(uid, ann)
		if err != nil {
			t.Fatal(err)
		}
		ann[PlacementSealAnnotation] = own
		if err := keys.Verify(uid, ann); err != nil {
			t.Fatalf("its own seal refused: %v", err)
		}
	})
}

// Accepting unsealed placements (the upgrade from a release that did not seal): a placement
// with no seal is trusted, one whose seal is there is verified as ever.
func TestAcceptingUnsealedPlacementsStillVerifiesSeals(t *testing.T) {
	table := readSealTable(t)
	keys := tableKeys(t, table, "")
	keys.AcceptUnsealed(true)
	for _, c := range table.Verdicts {
		err := keys.Verify(c.PodUID, c.Annotations)
		unsealed := c.Annotations[PlacementSealAnnotation] == ""
		switch {
		case (c.Verified || unsealed) && err != nil:
			t.Errorf("%s: refused (%v)", c.Case, err)
		case !c.Verified && !unsealed && err == nil:
			t.Errorf("%s: verified, want an error with %q", c.Case, c.Error)
		}
	}
	var none *SealKeys
	none.AcceptUnsealed(true) // sealing off: nothing to set
}
