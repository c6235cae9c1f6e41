package drapublish

import (
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"tmc.dev/scheduler-plugin/pkg/dra"
)

// Changes is what turns the stored slices into the desired ones: slices to create, slices to
// update (each carrying the stored resourceVersion) and slices to delete (by name and UID).
type Changes struct {
	Create []resourceapi.ResourceSlice
	Update []resourceapi.ResourceSlice
	Delete []Gone
}

// Gone is a stored slice to delete.
type Gone struct {
	Name string
	UID  types.UID
}

// Empty says there is nothing to do.
func (c Changes) Empty() bool { return len(c.Create)+len(c.Update)+len(c.Delete) == 0 }

// Diff compares stored and desired pool by pool. A pool whose slices match the desired ones by
// name, spec (all but the pool's generation) and owner is left alone; any other is written
// whole at a generation above every stored one of it (DRA's consumers then ignore its older
// slices), its surplus slices deleted. Stored slices of pools no longer desired are deleted.
// Only slices of the driver tmc.dev are ever in the result: stored ones of another driver are
// ignored.
func Diff(stored, desired []resourceapi.ResourceSlice) Changes {
	have := map[string][]resourceapi.ResourceSlice{}
	for _, s := range stored {
		if s.Spec.Driver != dra.DriverName {
			continue
		}
		have[s.Spec.Pool.Name] = append(have[s.Spec.Pool.Name], s)
	}
	want := map[string][]resourceapi.ResourceSlice{}
	var pools []string
	for _, s := range desired {
		if _, ok := want[s.Spec.Pool.Name]; !ok {
			pools = append(pools, s.Spec.Pool.Name)
		}
		want[s.Spec.Pool.Name] = append(want[s.Spec.Pool.Name], s)
	}
	var out Changes
	for _, pool := range pools {
		old, wanted := have[pool], want[pool]
		if same(old, wanted) {
			continue
		}
		generation := int64(0)
		byName := map[string]resourceapi.ResourceSlice{}
		for _, s := range old {
			generation = max(generation, s.Spec.Pool.Generation)
			byName[s.Name] = s
		}
		generation++
		for _, s := range wanted {
			s = *s.DeepCopy()
			s.Spec.Pool.Generation = generation
			if prior, ok := byName[s.Name]; ok {
				s.ResourceVersion = prior.ResourceVersion
				out.Update = append(out.Update, s)
				delete(byName, s.Name)
			} else {
				out.Create = append(out.Create, s)
			}
		}
		for name, s := range byName {
			out.Delete = append(out.Delete, Gone{Name: name, UID: s.UID})
		}
	}
	for pool, old := range have {
		if _, ok := want[pool]; ok {
			continue
		}
		for _, s := range old {
			out.Delete = append(out.Delete, Gone{Name: s.Name, UID: s.UID})
		}
	}
	sort.Slice(out.Delete, func(i, j int) bool { return out.Delete[i].Name < out.Delete[j].Name })
	return out
}

// same says the stored slices of a pool are the desired ones: the same names, and each with
// the same spec (its generation aside, which must be one across the pool) and owners.
func same(stored, desired []resourceapi.ResourceSlice) bool {
	if len(stored) != len(desired) {
		return false
	}
	byName := map[string]resourceapi.ResourceSlice{}
	for _, s := range stored {
		byName[s.Name] = s
	}
	var generation *int64
	for _, d := range desired {
		s, ok := byName[d.Name]
		if !ok {
			return false
		}
		if generation == nil {
			generation = &s.Spec.Pool.Generation
		} else if *generation != s.Spec.Pool.Generation {
			return false
		}
		a, b := s.Spec.DeepCopy(), d.Spec.DeepCopy()
		a.Pool.Generation, b.Pool.Generation = 0, 0
		if !equality.Semantic.DeepEqual(a, b) || !sameOwners(s.OwnerReferences, d.OwnerReferences) {
			return false
		}
	}
	return true
}

func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].APIVersion != b[i].APIVersion || a[i].Kind != b[i].Kind || a[i].Name != b[i].Name || a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}
