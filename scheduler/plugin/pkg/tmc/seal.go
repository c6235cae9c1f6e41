package tmc

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Sealed placements (v1alpha1.SealKeys): the engine seals every placement it writes, and counts
// a bound pod's placement only when the seal verifies, so that a placement carried by anyone
// else's Binding or pod write reserves nothing.

// PlacementSealAnnotation carries a placement's seal.
const PlacementSealAnnotation = v1alpha1.PlacementSealAnnotation

// SealKeys seal placements and verify their seals.
type SealKeys = v1alpha1.SealKeys

// maxSealAnnotationBytes is what the seal adds to a pod's annotations at most, key and value.
const maxSealAnnotationBytes = len(PlacementSealAnnotation) + v1alpha1.MaxPlacementSealBytes

// NewSealKeys is a fixed set of keys, signing naming the one that seals.
func NewSealKeys(keys map[string][]byte, signing string) (*SealKeys, error) {
	return v1alpha1.NewSealKeys(keys, signing)
}

// LoadSealKeys reads the key directory (a mounted Secret) and names the key that seals; ""
// turns sealing off.
func LoadSealKeys(dir, signing string) (*SealKeys, error) {
	k, err := v1alpha1.LoadSealKeys(dir, signing)
	if err == nil && k != nil && signing == "" {
		return nil, fmt.Errorf("placement seal keys in %s without the signing key's id", dir)
	}
	return k, err
}

// sealPlacement adds the seal of the placement annotations ann hold to ann (nothing when
// sealing is off).
func sealPlacement(ann map[string]string, pod *v1.Pod, keys *SealKeys) error {
	seal, err := keys.Seal(string(pod.UID), ann)
	if err != nil {
		return fmt.Errorf("tmc: sealing the placement of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if seal != "" {
		ann[PlacementSealAnnotation] = seal
	}
	return nil
}
