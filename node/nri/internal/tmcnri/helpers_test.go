package tmcnri

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// fakeNode is one NUMA node of a test sysfs tree.
type fakeNode struct {
	cpus     string
	memKB    int64
	distance string
}

// writeSysfs writes the NUMA part of a sysfs tree the way the kernel lays it out.
func writeSysfs(t *testing.T, nodes []fakeNode) string {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "devices", "system", "node")
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = fmt.Sprint(i)
		d := filepath.Join(base, fmt.Sprintf("node%d", i))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "cpulist"), []byte(n.cpus+"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "meminfo"), []byte(fmt.Sprintf(
			"Node %d MemTotal:       %d kB\nNode %d MemFree:        1 kB\n", i, n.memKB, i)), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "distance"), []byte(n.distance+"\n"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(base, "online"), []byte(FormatList(seq(len(nodes)))+"\n"), 0o644))
	return root
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// twoSockets: node0 (CPUs 0-1) and node1 (CPUs 2-3) are DRAM, 16 GiB each; node2 is slow memory
// near node0, node3 slow memory near node1, 64 GiB each.
func twoSockets(t *testing.T) string {
	return writeSysfs(t, []fakeNode{
		{"0-1", 16 << 20, "10 21 14 24"},
		{"2-3", 16 << 20, "21 10 24 14"},
		{"", 64 << 20, "14 24 10 26"},
		{"", 64 << 20, "24 14 26 10"},
	})
}

// writeResctrl is a resctrl tree as the kernel shows it with L3 CAT: 11 ways, two cache domains.
func writeResctrl(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	info := filepath.Join(root, "info", "L3")
	must(t, os.MkdirAll(info, 0o755))
	must(t, os.WriteFile(filepath.Join(info, "cbm_mask"), []byte("7ff\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(info, "min_cbm_bits"), []byte("1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(info, "num_closids"), []byte("16\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "schemata"), []byte("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n"), 0o644))
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type event struct {
	pod, reason, message string
}

// recorder keeps what the plugin reported and counted (the API server and Prometheus are the
// real sinks; these tests check what reaches them).
type recorder struct {
	mu        sync.Mutex
	events    []event
	outcomes  map[string]int
	unapplied map[string]int
}

func newRecorder() *recorder {
	return &recorder{outcomes: map[string]int{}, unapplied: map[string]int{}}
}

func (r *recorder) Event(pod *api.PodSandbox, _ bool, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{podKey(pod), reason, message})
}
func (r *recorder) Container(o string) { r.mu.Lock(); r.outcomes[o]++; r.mu.Unlock() }
func (r *recorder) Unapplied(w string) { r.mu.Lock(); r.unapplied[w]++; r.mu.Unlock() }
func (r *recorder) Handled(float64)    {}

func (r *recorder) reasons() string {
	var out []string
	for _, e := range r.events {
		out = append(out, e.reason)
	}
	return strings.Join(out, ",")
}

func placementJSON(node, mask string, ways int, dram, slow int64) string {
	return fmt.Sprintf(`{"schema":"tmc.placement/v2","node":%q,"workload":"graph500","objective":"cheapest",`+
		`"configuration":{"vcpus":2,"dram_bytes":%d,"slow_bytes":%d,"slow_ratio":0.5,"llc_ways":%d},`+
		`"llc_mask":%q,"slow_from_pool":false,"recommendation_id":"r1","fallback":null,`+
		`"plan":[{"tag":"edges","fast_bytes":%d,"slow_bytes":%d}]}`, node, dram, slow, ways, mask, dram/2, slow)
}

// tieredLabels are the labels of a pod tmc places (v1alpha1.IsTieredPod).
func tieredLabels() map[string]string {
	return map[string]string{v1alpha1.TieredPodLabel: v1alpha1.TieredPodLabelValue}
}

// pod is a pod sandbox carrying the tiered pod label.
func pod(name, uid string, ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sb-" + uid, Name: name, Uid: uid, Namespace: "default", Annotations: ann, Labels: tieredLabels()}
}

func container(name, cpus string, env ...string) *api.Container {
	return &api.Container{
		Id: "c-" + name, Name: name, Env: env,
		Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: cpus}}},
	}
}
