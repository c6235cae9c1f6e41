package v1alpha1

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sealed placements. A Binding's annotations are copied onto the pod it binds, so whoever may
// bind a pod may write its placement; an admission policy can stop that only by judging every
// Binding of the cluster, tmc's pods or not (a Binding carries none of its pod's labels). Instead
// the engine seals each placement it writes with a key that only tmc's components hold: an
// HMAC-SHA256 over the pod's UID and the placement's exact text. Every reader of placements
// (the engine's accounting, tmc-nri, the publisher) trusts only a placement whose seal it
// verifies, so a placement written by anyone else holds nothing, whatever the write that carried
// it. The seal's text and message are the contract's (scheduler/conformance/placement_seals.json),
// and model.node_contract reads them alike.

const (
	// PlacementSealAnnotation carries the seal: "v1:<key id>:<MAC, unpadded base64url>".
	PlacementSealAnnotation = Group + "/placement-seal"
	// SealVersion names the message's layout; a seal of another version is not verified.
	SealVersion = "v1"
	// sealDomain starts every message, so that a MAC made for anything else is never a seal.
	sealDomain = "tmc.dev/placement-seal/v1"
	// MinSealKeyBytes and MaxSealKeyBytes bound a key: 32 bytes are the MAC's own strength;
	// a key file longer than a few lines is not a key.
	MinSealKeyBytes = 32
	MaxSealKeyBytes = 1024
	// MaxSealKeys bounds a key directory: the keys in use and those being rotated in or out.
	MaxSealKeys = 16
	// MaxPlacementSealBytes bounds the seal's text: a version, a key id and a MAC are shorter.
	MaxPlacementSealBytes = 200
	// sealReloadInterval is how often at most a seal naming an unknown key re-reads the key
	// directory (a Secret volume is updated in place when a key is added).
	sealReloadInterval = 10 * time.Second
)

// sealKeyID is a key's name: a Secret data key that is also a DNS label, so that it reads the
// same in a file name, a flag and a seal.
var sealKeyID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// SealError says why a placement's seal does not hold. KeyNotHeld: the seal names a key this
// component does not hold yet (a key just added to the Secret reaches a node's volume a minute
// or two later), so the same seal may verify later.
//
// +kubebuilder:object:generate=false
type SealError struct {
	Msg        string
	KeyNotHeld bool
}

func (e *SealError) Error() string { return e.Msg }

func sealErrorf(format string, args ...any) error {
	return &SealError{Msg: fmt.Sprintf(format, args...)}
}

// SealKeys are the keys that seal placements and verify their seals: every key of a directory
// (one file per key, named by its id, as a mounted Secret lays them out), and the id of the one
// that seals. A nil *SealKeys seals nothing and verifies everything: sealing is off.
//
// +kubebuilder:object:generate=false
type SealKeys struct {
	dir     string
	signing string
	keys    atomic.Pointer[map[string][]byte]
	mu      sync.Mutex // one reload at a time
	loaded  atomic.Int64
	now     func() time.Time
	// acceptUnsealed trusts a placement that carries no seal at all (one with a seal is still
	// verified): for the upgrade from a release that did not seal, while the pods it placed run
	// and the binding admission policy guards Bindings.
	acceptUnsealed bool
}

// AcceptUnsealed makes Verify trust a placement that carries no seal (a seal that is there is
// still verified). Set it before the keys are shared.
func (k *SealKeys) AcceptUnsealed(on bool) {
	if k != nil {
		k.acceptUnsealed = on
	}
}

// NewSealKeys is a fixed set of keys (no directory): signing names the one that seals ("" for a
// reader that only verifies).
func NewSealKeys(keys map[string][]byte, signing string) (*SealKeys, error) {
	own := make(map[string][]byte, len(keys))
	for id, key := range keys {
		if err := checkSealKey(id, key); err != nil {
			return nil, err
		}
		own[id] = bytes.Clone(key)
	}
	return newSealKeys("", signing, own)
}

// LoadSealKeys reads a key directory: every regular file whose name is a key id (names starting
// with "." are the Secret volume's own bookkeeping), its bytes less trailing whitespace the key.
// The directory is read again when a seal names a key it did not hold, at most every ten
// seconds, so that a key added to the Secret is verified without a restart. "" is sealing off.
func LoadSealKeys(dir, signing string) (*SealKeys, error) {
	if dir == "" {
		if signing != "" {
			return nil, fmt.Errorf("a signing key %q without a key directory", clip(signing, 70))
		}
		return nil, nil
	}
	keys, err := readSealKeys(dir)
	if err != nil {
		return nil, err
	}
	return newSealKeys(dir, signing, keys)
}

func newSealKeys(dir, signing string, keys map[string][]byte) (*SealKeys, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("no placement seal key in %s", orFixed(dir))
	}
	if signing != "" {
		if _, ok := keys[signing]; !ok {
			return nil, fmt.Errorf("the signing key %q is not one of the keys in %s", clip(signing, 70), orFixed(dir))
		}
	}
	k := &SealKeys{dir: dir, signing: signing, now: time.Now}
	k.keys.Store(&keys)
	k.loaded.Store(k.now().UnixNano())
	return k, nil
}

func orFixed(dir string) string {
	if dir == "" {
		return "the given keys"
	}
	return dir
}

func checkSealKey(id string, key []byte) error {
	if !sealKeyID.MatchString(id) {
		return fmt.Errorf("%q is not a placement seal key id (a DNS label)", clip(id, 70))
	}
	if len(key) < MinSealKeyBytes || len(key) > MaxSealKeyBytes {
		return fmt.Errorf("placement seal key %s has %d bytes, not %d..%d", id, len(key), MinSealKeyBytes, MaxSealKeyBytes)
	}
	return nil
}

func readSealKeys(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("placement seal keys: %w", err)
	}
	keys := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path) // a Secret volume's keys are links into its ..data
		if err != nil {
			return nil, fmt.Errorf("placement seal keys: %w", err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if info.Size() > MaxSealKeyBytes+64 {
			return nil, fmt.Errorf("placement seal key %s: %d bytes is not a key", clip(name, 70), info.Size())
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("placement seal keys: %w", err)
		}
		key := bytes.TrimRight(raw, " \t\r\n")
		if err := checkSealKey(name, key); err != nil {
			return nil, err
		}
		if len(keys) == MaxSealKeys {
			return nil, fmt.Errorf("more than %d placement seal keys in %s", MaxSealKeys, dir)
		}
		keys[name] = key
	}
	return keys, nil
}

// SigningKey is the id of the key that seals ("" for a reader).
func (k *SealKeys) SigningKey() string {
	if k == nil {
		return ""
	}
	return k.signing
}

// KeyIDs are the ids of the keys held now, sorted.
func (k *SealKeys) KeyIDs() []string {
	if k == nil {
		return nil
	}
	keys := *k.keys.Load()
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// SealMessage is what a seal's MAC is taken over: the domain, then the pod's UID, the placement
// annotation and the LLC-mask annotation ("" when the pod has none), each as its length in
// bytes, a colon and its bytes, after a newline. Lengths first, so that no two triples give the
// same message.
func SealMessage(podUID, placement, llcMask string) []byte {
	var b bytes.Buffer
	b.Grow(len(sealDomain) + len(podUID) + len(placement) + len(llcMask) + 40)
	b.WriteString(sealDomain)
	for _, field := range [3]string{podUID, placement, llcMask} {
		b.WriteByte('\n')
		b.WriteString(strconv.Itoa(len(field)))
		b.WriteByte(':')
		b.WriteString(field)
	}
	return b.Bytes()
}

func mac(key, message []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write(message)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// Seal is the seal of a pod's placement annotations (ann: the placement and, if the pod gets
// one, the LLC mask), with the signing key. A nil receiver seals nothing ("", nil).
func (k *SealKeys) Seal(podUID string, ann map[string]string) (string, error) {
	if k == nil {
		return "", nil
	}
	if k.signing == "" {
		return "", fmt.Errorf("no signing key: this component only verifies placement seals")
	}
	key := (*k.keys.Load())[k.signing]
	msg := SealMessage(podUID, ann[PlacementAnnotation], ann[LLCMaskAnnotation])
	return SealVersion + ":" + k.signing + ":" + mac(key, msg), nil
}

// Verify says whether a pod's placement annotations carry a seal made with one of the keys:
// nil when they do (or when the receiver is nil: sealing off), a *SealError naming what is
// wrong otherwise. It compares in constant time and never panics.
func (k *SealKeys) Verify(podUID string, ann map[string]string) error {
	if k == nil {
		return nil
	}
	seal, ok := ann[PlacementSealAnnotation]
	if (!ok || seal == "") && k.acceptUnsealed {
		return nil
	}
	if !ok || seal == "" {
		return sealErrorf("the placement carries no %s: tmc's scheduler did not write it", PlacementSealAnnotation)
	}
	if len(seal) > MaxPlacementSealBytes {
		return sealErrorf("%s is not a seal (%d bytes)", PlacementSealAnnotation, len(seal))
	}
	version, rest, ok1 := strings.Cut(seal, ":")
	id, given, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || version != SealVersion || !sealKeyID.MatchString(id) {
		return sealErrorf("%s %q is not a %s seal (v1:<key id>:<MAC>)", PlacementSealAnnotation, clip(seal, 80), SealVersion)
	}
	key, held := k.key(id)
	if !held {
		return &SealError{KeyNotHeld: true, Msg: fmt.Sprintf("%s names key %q, which this component does not hold (keys: %s)",
			PlacementSealAnnotation, id, strings.Join(k.KeyIDs(), ", "))}
	}
	want := mac(key, SealMessage(podUID, ann[PlacementAnnotation], ann[LLCMaskAnnotation]))
	if !hmac.Equal([]byte(want), []byte(given)) {
		return sealErrorf("%s does not match the placement: written or changed by someone other than tmc's scheduler", PlacementSealAnnotation)
	}
	return nil
}

// key is the key named id, re-reading the directory first when it is not held and the last
// read is old enough.
func (k *SealKeys) key(id string) ([]byte, bool) {
	if key, ok := (*k.keys.Load())[id]; ok {
		return key, true
	}
	if k.dir == "" || k.now().UnixNano()-k.loaded.Load() < int64(sealReloadInterval) {
		return nil, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.now().UnixNano()-k.loaded.Load() >= int64(sealReloadInterval) {
		k.loaded.Store(k.now().UnixNano())
		// A directory that cannot be read now keeps the keys read before: a Secret volume
		// being updated is briefly in between.
		if keys, err := readSealKeys(k.dir); err == nil && len(keys) > 0 {
			if _, ok := keys[k.signing]; ok || k.signing == "" {
				k.keys.Store(&keys)
			}
		}
	}
	key, ok := (*k.keys.Load())[id]
	return key, ok
}
