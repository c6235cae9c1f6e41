package tmcnri

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"
)

// placedPlacements are the shared table's placements that read as placed, and a few more with
// per-structure plans, as pod annotations.
func placedPlacements(t *testing.T) map[string]map[string]string {
	t.Helper()
	raw, err := os.ReadFile(placementVerdictsPath)
	must(t, err)
	var table struct {
		Cases []struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
			PadTo       int               `json:"pad_to"`
			Verdict     string            `json:"verdict"`
		} `json:"cases"`
	}
	must(t, json.NewDecoder(bytes.NewReader(raw)).Decode(&table))
	out := map[string]map[string]string{}
	for _, c := range table.Cases {
		if c.Verdict != "placed" {
			continue
		}
		if raw := c.Annotations[PlacementAnnotation]; c.PadTo > len(raw) {
			c.Annotations[PlacementAnnotation] = raw + strings.Repeat(" ", c.PadTo-len(raw))
		}
		out["table: "+c.Name] = c.Annotations
	}
	if len(out) < 3 {
		t.Fatalf("%s: only %d placed cases", placementVerdictsPath, len(out))
	}
	plan := func(mask string, dram, slow int64, pool bool, structures string) map[string]string {
		return map[string]string{LLCMaskAnnotation: mask, PlacementAnnotation: fmt.Sprintf(
			`{"schema":"tmc.placement/v2","node":"node-a","workload":"xsbench","objective":"cheapest",`+
				`"configuration":{"vcpus":2,"dram_bytes":%d,"slow_bytes":%d,"slow_ratio":0.5,"llc_ways":2},`+
				`"llc_mask":%q,"slow_from_pool":%t,"recommendation_id":"r7","fallback":null,"plan":[%s]}`,
			dram, slow, mask, pool, structures)}
	}
	out["plan: two structures, slow memory"] = plan("0x6", 2*gib, 6*gib, false,
		`{"tag":"grid","fast_bytes":1073741824,"slow_bytes":5368709120},{"tag":"index","fast_bytes":536870912,"slow_bytes":0}`)
	out["plan: all DRAM"] = plan("0x600", 3*gib, 0, false, `{"tag":"grid","fast_bytes":3221225472,"slow_bytes":0}`)
	out["plan: slow memory from the rack pool"] = plan("0x3", gib, 3*gib, true, `{"tag":"edges","fast_bytes":1073741824,"slow_bytes":3221225472}`)
	out["plan: a mask the node cannot give"] = plan("0x1800", gib, gib, false, `{"tag":"edges","fast_bytes":1073741824,"slow_bytes":1073741824}`)
	return out
}

// Container creation and the reconcile mode apply a placement by one rule: for every placement
// that reads as placed, each path computes its adjustment with Adjust, once, and the two are
// equal; and what each path applies (the runtime's spec; the pod's cgroup and resctrl group) is
// that adjustment.
func TestCreationAndReconcileApplyTheSameAdjustment(t *testing.T) {
	ctx := context.Background()
	for name, ann := range placedPlacements(t) {
		t.Run(name, func(t *testing.T) {
			pl, err := ParsePlacement(ann)
			if err != nil || pl == nil {
				t.Fatalf("not placed: %v", err)
			}
			uid := "6f1c2a9e-7a11"
			var computed []Adjustment
			seen := func(p *Placement, n NodeLayout, tg Target) Adjustment {
				a := Adjust(p, n, tg)
				computed = append(computed, a)
				return a
			}
			sys, shim := twoSockets(t), t.TempDir()
			must(t, os.WriteFile(filepath.Join(shim, shimName), []byte("\x7fELF"), 0o644))

			rec := newRecorder()
			plugin := New(Config{NodeName: pl.Node, SysRoot: sys, Resctrl: &Resctrl{Root: writeResctrl(t)},
				PlanDir: t.TempDir(), ShimDir: shim}, rec, rec)
			plugin.adjust = seen
			adj, _, err := plugin.CreateContainer(ctx, pod("app", uid, ann), container("app", "2-3"))
			if err != nil || adj == nil {
				t.Fatalf("creation: %v %v (%v)", adj, err, rec.events)
			}

			root, podDir := writeCgroups(t, uid, "2-3", "31", "32")
			resctrl := writeResctrl(t)
			r := &Reconciler{NodeName: pl.Node, SysRoot: sys, Resctrl: &Resctrl{Root: resctrl}, CgroupRoot: root, adjust: seen}
			done := r.Reconcile([]corev1.Pod{runningPod("app", uid, pl.Node, ann)})
			if len(done) != 1 {
				t.Fatalf("reconciled %+v", done)
			}

			if len(computed) != 2 {
				t.Fatalf("Adjust computed %d adjustments, not one for each path", len(computed))
			}
			want := computed[0]
			if !reflect.DeepEqual(want, computed[1]) {
				t.Fatalf("creation and reconcile disagree:\n%+v\n%+v", want, computed[1])
			}

			// What each path applied is that adjustment.
			res := adj.GetLinux().GetResources()
			memoryMax := readTrim(t, filepath.Join(podDir, "memory.max"))
			if want.MemoryLimit > 0 {
				if res.GetMemory().GetLimit().GetValue() != want.MemoryLimit || memoryMax != fmt.Sprint(want.MemoryLimit) {
					t.Errorf("memory limit %d: creation %v, reconcile %s", want.MemoryLimit, res.GetMemory().GetLimit(), memoryMax)
				}
			} else if res.GetMemory().GetLimit() != nil || memoryMax != "max" {
				t.Errorf("no memory limit: creation %v, reconcile %s", res.GetMemory().GetLimit(), memoryMax)
			}
			mems := readTrim(t, filepath.Join(podDir, "cpuset.mems"))
			if res.GetCpu().GetMems() != FormatList(want.Mems) || mems != FormatList(want.Mems) || len(want.Mems) == 0 {
				t.Errorf("cpuset.mems %v: creation %q, reconcile %q", want.Mems, res.GetCpu().GetMems(), mems)
			}
			rdt := adj.GetLinux().GetRdt()
			group := filepath.Join(resctrl, want.Group)
			if want.Schemata != "" {
				if s := rdt.GetSchemata().GetValue(); len(s) != 1 || s[0] != want.Schemata || rdt.GetClosId().GetValue() != want.Group {
					t.Errorf("creation's resctrl %v", rdt)
				}
				if got := readTrim(t, filepath.Join(group, "schemata")); got != want.Schemata {
					t.Errorf("reconcile's schemata %q, want %q", got, want.Schemata)
				}
				if got := readTrim(t, filepath.Join(group, "tasks")); got != "31\n32" {
					t.Errorf("reconcile's tasks %q", got)
				}
			} else {
				if rdt != nil {
					t.Errorf("creation gave resctrl %v for a mask the node cannot give", rdt)
				}
				if _, err := os.Stat(group); !os.IsNotExist(err) {
					t.Errorf("reconcile made %s for a mask the node cannot give", group)
				}
				joined := strings.Join(done[0].Unapplied, ";")
				if !strings.Contains(joined, "llc-mask: "+want.LLCUnapplied) {
					t.Errorf("reconcile did not say why: %s", joined)
				}
			}
			plan, err := os.ReadFile(filepath.Join(plugin.cfg.PlanDir, want.PlanFile))
			if err != nil || string(plan) != want.Plan || want.Plan == "" {
				t.Errorf("creation's plan %q, want %q (%v)", plan, want.Plan, err)
			}
		})
	}
}

// Synchronize, too, computes a late container's correction with Adjust.
func TestSynchronizeCorrectsWithTheSameAdjustment(t *testing.T) {
	f := newFixture(t, true)
	var computed []Adjustment
	f.plugin.adjust = func(p *Placement, n NodeLayout, tg Target) Adjustment {
		a := Adjust(p, n, tg)
		computed = append(computed, a)
		return a
	}
	late := pod("late", "6f1c2a9e-5e1f", placed("node-a", "0x3", 2, 2*gib, gib))
	ctr := container("late", "2-3")
	ctr.PodSandboxId = late.Id
	updates, err := f.plugin.Synchronize(context.Background(), nil, nil)
	must(t, err)
	if len(updates) != 0 || len(computed) != 0 {
		t.Fatal("nothing to synchronise, something corrected")
	}
	updates, err = f.plugin.Synchronize(context.Background(), []*api.PodSandbox{late}, []*api.Container{ctr})
	must(t, err)
	if len(computed) != 1 || len(updates) != 1 {
		t.Fatalf("computed %d, updates %d", len(computed), len(updates))
	}
	res := updates[0].GetLinux().GetResources()
	if res.GetMemory().GetLimit().GetValue() != computed[0].MemoryLimit || res.GetCpu().GetMems() != FormatList(computed[0].Mems) {
		t.Errorf("update %v, adjustment %+v", res, computed[0])
	}
}
