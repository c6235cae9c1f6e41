package tmcnri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"tmc.dev/scheduler-plugin/pkg/apis/tmc/v1alpha1"
)

// Reconciler applies placements to pods that are already running, for runtimes without NRI: the
// same Adjust as container creation, applied to the pod's cgroup (cgroup v2 memory.max and
// cpuset.mems), to its resctrl group (schemata, and the pod's threads in its tasks) and to its
// plan file in the node's plan directory. It writes only what differs, so a round repeated
// changes nothing. What only creation can give (the plan and the allocator shim mounted into the
// container, TMC_PLAN set) it reports as not applied.
type Reconciler struct {
	NodeName   string
	SysRoot    string   // the host's /sys (NUMA topology)
	Resctrl    *Resctrl // nil or an empty root: no resctrl
	CgroupRoot string   // the host's cgroup v2 mount (/sys/fs/cgroup)
	// PlanDir is the node's plan directory (the plugin's), where a pod that mounts it finds its
	// plan as <uid>.plan; "" writes no plans.
	PlanDir string
	// Tenants, when it selects, are the namespaces whose placements are applied; Namespaces
	// tells their labels (as for the plugin).
	Tenants    *v1alpha1.TenantNamespaces
	Namespaces Namespaces
	// Seals, when set, are the keys a placement must be sealed with to be applied (as for the
	// plugin).
	Seals *v1alpha1.SealKeys
	// Plans are the published recommendations a tmc.placement/v3 names its plan in (nil: none
	// can be read).
	Plans PublishedPlans
	// DRACheckpoint is tmc-dra-node's checkpoint of the claims it prepared on this node ("":
	// none): a running pod a prepared claim is reserved for gets the claim's configuration.
	DRACheckpoint string

	// adjust is Adjust; a test wraps it to see that every path computes its adjustment there.
	adjust func(*Placement, NodeLayout, Target) Adjustment
	// now is time.Now; a test sets the clock the wait for a published plan is measured on.
	now func() time.Time
}

// Reconciled is what one round did to one placed pod.
type Reconciled struct {
	Pod       string   // namespace/name
	Written   []string // what differed and was written
	Unapplied []string // what the placement asks for and this pod did not get, and why
}

// notAtCreation is why the reconcile mode never mounts a pod's plan or shim into its containers:
// a pod that wants them mounts the plan directory and preloads the shim in its own spec.
const notAtCreation = "plan and shim mounts: added only when a container is created (recreate the pod under a runtime with NRI, or mount the plan directory and preload the shim in the pod's spec)"

// Bounds on what a cgroup tree may make the reconciler read.
const (
	maxCgroupDepth = 4       // root/kubepods/qos/pod: the pod's cgroup is at most this deep
	maxTaskFile    = 1 << 20 // one cgroup.threads or resctrl tasks file
)

// Reconcile applies each placed pod of this node once, and says what it did.
func (r *Reconciler) Reconcile(pods []corev1.Pod) []Reconciled {
	adjust := r.adjust
	if adjust == nil {
		adjust = Adjust
	}
	// An unreadable topology leaves the memory limit to apply (the adjustment says why the rest
	// is not).
	node, _ := ReadNodeLayout(r.SysRoot, r.Resctrl)
	claims, claimsErr := r.preparedClaims()
	var out []Reconciled
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName != r.NodeName || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		// A prepared claim first, as at container creation (a container naming a claim takes
		// the claim's configuration whatever its pod's annotations say).
		if claim, ok := claims.reservedFor(string(pod.UID)); ok {
			done := Reconciled{Pod: pod.Namespace + "/" + pod.Name}
			r.apply(pod, claims.DRAPlacement(r.NodeName, claims.Claims[claim]), DRAGroup(claim), node, adjust, &done)
			out = append(out, done)
			continue
		}
		if claimsErr != nil && len(pod.Spec.ResourceClaims) > 0 {
			out = append(out, Reconciled{Pod: pod.Namespace + "/" + pod.Name,
				Unapplied: []string{"dra claim: cannot read the prepared claims: " + claimsErr.Error()}})
			continue
		}
		pl, err := ParsePlacement(pod.Annotations)
		if pl == nil && err == nil {
			continue // not placed by tmc
		}
		done := Reconciled{Pod: pod.Namespace + "/" + pod.Name}
		unsealed := r.Seals.Verify(string(pod.UID), pod.Annotations)
		switch {
		case err != nil:
			done.Unapplied = append(done.Unapplied, "placement: "+err.Error())
		case pl.Node != r.NodeName:
			done.Unapplied = append(done.Unapplied, fmt.Sprintf("placement: placed on node %q, this is %q", clip(pl.Node, 60), r.NodeName))
		case !uidText.MatchString(string(pod.UID)):
			done.Unapplied = append(done.Unapplied, fmt.Sprintf("placement: pod uid %q is not a Kubernetes uid", clip(string(pod.UID), 70)))
		case !v1alpha1.IsTieredPod(pod.Labels):
			done.Unapplied = append(done.Unapplied, "placement: "+untiered)
		case unsealed != nil:
			done.Unapplied = append(done.Unapplied, "placement: "+unsealed.Error())
		default:
			switch tenantOf(r.Tenants, r.Namespaces, pod.Namespace) {
			case tenantNot:
				done.Unapplied = append(done.Unapplied, "placement: namespace "+pod.Namespace+" is not one of tmc's tenant namespaces")
			case tenantUnknown:
				done.Unapplied = append(done.Unapplied, "placement: tmc's tenant namespaces are not known yet")
			default:
				// The plan resolved in an earlier round is kept with the pod's plan file and read
				// back: the object moving on since changes nothing the pod started with.
				resolved, unavailable := ResolvePodPlan(r.PlanDir, string(pod.UID), pl, r.Plans, r.waitedOut(pod))
				switch {
				case resolved == nil:
					done.Unapplied = append(done.Unapplied, "placement: "+unavailable)
				default:
					if unavailable != "" {
						done.Unapplied = append(done.Unapplied, "plan: "+unavailable)
					}
					r.apply(pod, resolved, "", node, adjust, &done)
				}
			}
		}
		out = append(out, done)
	}
	return out
}

// waitedOut: the pod has waited PlanWait for the node to see the plan its placement names,
// counted from when the kubelet started it (its creation, if the kubelet has not said).
func (r *Reconciler) waitedOut(pod *corev1.Pod) bool {
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	since := pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		since = pod.Status.StartTime.Time
	}
	return now().Sub(since) >= PlanWait
}

// preparedClaims is the checkpoint of the claims prepared on this node: empty with none (no
// checkpoint configured, or no claim ever prepared), an error when it cannot be read.
func (r *Reconciler) preparedClaims() (*DRACheckpoint, error) {
	none := &DRACheckpoint{Claims: map[string]DRAClaim{}}
	if r.DRACheckpoint == "" {
		return none, nil
	}
	c, err := ReadDRACheckpoint(r.DRACheckpoint)
	if errors.Is(err, ErrNoDRACheckpoint) {
		return none, nil
	} else if err != nil {
		return none, err
	}
	return c, nil
}

// apply writes what Adjust makes of pl for the pod; group, when set, is the resctrl group its
// ways are in (a DRA claim's, shared by the pods it is reserved for).
func (r *Reconciler) apply(pod *corev1.Pod, pl *Placement, group string, node NodeLayout, adjust func(*Placement, NodeLayout, Target) Adjustment, done *Reconciled) {
	uid := string(pod.UID)
	cg, err := findPodCgroup(r.CgroupRoot, uid)
	if err != nil {
		done.Unapplied = append(done.Unapplied, "cgroup: "+err.Error())
		return
	}
	cpus, err := readListFile(filepath.Join(cg, "cpuset.cpus.effective"))
	if err != nil {
		cpus = nil // all the node's CPUs: a safe superset
	}
	want := adjust(pl, node, Target{Pod: pod.Namespace + "/" + pod.Name, UID: uid, CPUs: cpus, OwnLimit: podMemoryLimit(pod), Group: group})
	unapplied := func(what, why string) { done.Unapplied = append(done.Unapplied, what+": "+why) }

	if want.MemoryLimit > 0 {
		text := strconv.FormatInt(want.MemoryLimit, 10)
		if changed, err := writeIfDiffers(filepath.Join(cg, "memory.max"), text); err != nil {
			unapplied("memory.max", err.Error())
		} else if changed {
			done.Written = append(done.Written, "memory.max "+text)
		}
	}

	if len(want.Mems) == 0 {
		unapplied("cpuset.mems", want.MemsUnapplied)
	} else if current, err := readListFile(filepath.Join(cg, "cpuset.mems")); err == nil && slices.Equal(current, want.Mems) {
		// already so
	} else if _, err := writeIfDiffers(filepath.Join(cg, "cpuset.mems"), FormatList(want.Mems)); err != nil {
		unapplied("cpuset.mems", err.Error())
	} else {
		done.Written = append(done.Written, "cpuset.mems "+FormatList(want.Mems))
	}

	switch {
	case r.PlanDir == "":
		unapplied("plan", "no plan directory (--plan-dir)")
	case want.Plan == "":
		unapplied("plan", want.PlanUnapplied)
	default:
		path := filepath.Join(r.PlanDir, want.PlanFile)
		if current, err := os.ReadFile(path); err == nil && string(current) == want.Plan {
			// already so
		} else if err := writeAtomic(path, want.Plan); err != nil {
			unapplied("plan", err.Error())
		} else {
			done.Written = append(done.Written, "plan "+want.PlanFile)
		}
	}

	if want.Schemata == "" {
		unapplied("llc-mask", want.LLCUnapplied)
	} else if changed, err := r.Resctrl.ensureGroup(want.Group, want.Schemata); err != nil {
		unapplied("llc-mask", err.Error())
	} else {
		if changed {
			done.Written = append(done.Written, "resctrl "+want.Group+" "+want.Schemata)
		}
		tids, err := podThreads(cg)
		if err != nil {
			unapplied("llc-mask", "the pod's threads: "+err.Error())
		} else if added, err := r.Resctrl.addTasks(want.Group, tids); err != nil {
			unapplied("llc-mask", err.Error())
		} else if added > 0 {
			done.Written = append(done.Written, fmt.Sprintf("resctrl %s tasks +%d", want.Group, added))
		}
	}
	done.Unapplied = append(done.Unapplied, notAtCreation)
}

// RemoveStale removes the resctrl groups and plan files of pods no longer running on this node
// (deleted or finished): their threads return to the default group, their CLOSIDs are free
// again. Only the placed pods' groups (GroupPrefix) and plans (<uid>.plan, and the plan resolved
// for them, <uid>.plan-from.json) are touched; pods is the whole of this node's pods, so a round
// whose list failed removes nothing.
func (r *Reconciler) RemoveStale(pods []corev1.Pod) (removed []string, err error) {
	live := map[string]bool{}
	for _, pod := range pods {
		if pod.Spec.NodeName == r.NodeName && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			live[string(pod.UID)] = true
		}
	}
	groups, gerr := r.removeStaleGroups(live)
	plans, perr := r.removeStalePlans(live)
	return append(groups, plans...), errors.Join(gerr, perr)
}

// removeStalePlans removes the plan files of pods not live (<uid>.plan and <uid>.plan-from.json);
// the records directory and anything else are left alone.
func (r *Reconciler) removeStalePlans(live map[string]bool) ([]string, error) {
	if r.PlanDir == "" {
		return nil, nil
	}
	planOf := func(e fs.DirEntry) (string, bool) {
		uid, ok := strings.CutSuffix(e.Name(), ".plan")
		if !ok {
			uid, ok = strings.CutSuffix(e.Name(), KeptPlanSuffix)
		}
		return uid, ok && !e.IsDir()
	}
	return removeStale(r.PlanDir, live, planOf, func(name string) error {
		err := os.Remove(filepath.Join(r.PlanDir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
}

func (r *Reconciler) removeStaleGroups(live map[string]bool) ([]string, error) {
	if r.Resctrl == nil || r.Resctrl.Root == "" {
		return nil, nil
	}
	groupOf := func(e fs.DirEntry) (string, bool) {
		uid, ok := strings.CutPrefix(e.Name(), GroupPrefix)
		return uid, ok && e.IsDir()
	}
	return removeStale(r.Resctrl.Root, live, groupOf, r.Resctrl.RemoveGroup)
}

// removeStale removes, with remove, the entries of dir that name a pod (podOf: its uid) no
// longer live, and returns their names; a directory that does not exist holds none.
func removeStale(
	dir string, live map[string]bool, podOf func(fs.DirEntry) (string, bool), remove func(name string) error,
) (removed []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range entries {
		uid, ok := podOf(e)
		if !ok || !uidText.MatchString(uid) || live[uid] {
			continue
		}
		if err := remove(e.Name()); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, e.Name())
		}
	}
	return removed, errors.Join(errs...)
}

// podMemoryLimit is the pod's own memory limit as its cgroup holds it: the sum of its
// containers' limits when every one has a limit (the kubelet's rule for the pod's memory.max),
// else 0, none. Read from the spec, not the cgroup, so that a limit this mode wrote is not later
// taken for the pod's own.
func podMemoryLimit(pod *corev1.Pod) int64 {
	var sum int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok || q.Value() <= 0 {
			return 0
		}
		sum += q.Value()
	}
	return sum
}

// findPodCgroup finds the pod's cgroup under root as the kubelet names it with either cgroup
// driver: kubepods/<qos>/pod<uid> (cgroupfs), or
// kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with underscores>.slice (systemd).
// Only kubepods directories are searched, a few levels deep.
func findPodCgroup(root, uid string) (string, error) {
	plain, systemd := "pod"+uid, "-pod"+strings.ReplaceAll(uid, "-", "_")+".slice"
	var walk func(dir string, depth int) string
	walk = func(dir string, depth int) string {
		if depth > maxCgroupDepth {
			return ""
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return ""
		}
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() {
				continue
			}
			if name == plain || strings.HasSuffix(name, systemd) {
				return filepath.Join(dir, name)
			}
			if !strings.HasPrefix(name, "kubepods") && name != "burstable" && name != "besteffort" {
				continue // not the kubelet's
			}
			if found := walk(filepath.Join(dir, name), depth+1); found != "" {
				return found
			}
		}
		return ""
	}
	if found := walk(root, 1); found != "" {
		return found, nil
	}
	return "", fmt.Errorf("no cgroup of pod %s under %s (kubepods…/pod%s)", uid, root, uid)
}

// podThreads are the threads in the pod's cgroup and its containers' (cgroup.threads of each).
func podThreads(cg string) ([]int, error) {
	var tids []int
	err := filepath.WalkDir(cg, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if rel, _ := filepath.Rel(cg, path); rel != "." && strings.Count(rel, string(filepath.Separator)) >= maxCgroupDepth {
			return filepath.SkipDir
		}
		text, err := readBounded(filepath.Join(path, "cgroup.threads"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(text) {
			tid, err := strconv.Atoi(f)
			if err != nil || tid <= 0 {
				return fmt.Errorf("%s: %q is not a thread id", filepath.Join(path, "cgroup.threads"), clip(f, 20))
			}
			tids = append(tids, tid)
		}
		return nil
	})
	slices.Sort(tids)
	return slices.Compact(tids), err
}

// addTasks puts the threads into the group, writing only those not in it yet (the kernel takes
// one id a write); a thread that ended meanwhile is passed over.
func (r *Resctrl) addTasks(name string, tids []int) (int, error) {
	path := filepath.Join(r.Root, name, "tasks")
	current, err := readBounded(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	in := map[int]bool{}
	for _, f := range strings.Fields(current) {
		if tid, err := strconv.Atoi(f); err == nil {
			in[tid] = true
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("resctrl group %s tasks: %w", name, err)
	}
	defer f.Close()
	added := 0
	for _, tid := range tids {
		if in[tid] {
			continue
		}
		if _, err := f.WriteString(strconv.Itoa(tid) + "\n"); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				continue
			}
			return added, fmt.Errorf("resctrl group %s refused thread %d: %w", name, tid, err)
		}
		added++
	}
	return added, nil
}

// writeIfDiffers writes text to a cgroup file unless it already holds it.
func writeIfDiffers(path, text string) (bool, error) {
	current, err := readSmall(path)
	if err != nil {
		return false, err // no such controller file: the cgroup does not offer it
	}
	if strings.TrimSpace(current) == text {
		return false, nil
	}
	if err := os.WriteFile(path, []byte(text+"\n"), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

func readListFile(path string) ([]int, error) {
	text, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	return ParseList(text)
}

// readBounded reads a file of ids that may be longer than readSmall's one read.
func readBounded(path string) (string, error) {
	data, long, err := readAtMost(path, maxTaskFile)
	if err != nil {
		return "", err
	}
	if long {
		return "", fmt.Errorf("%s is longer than %d bytes", path, maxTaskFile)
	}
	return string(data), nil
}

// readAtMost reads the file at path, up to limit bytes; long: it holds more (data is then cut).
func readAtMost(path string, limit int64) (data []byte, long bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, err
	}
	return data, int64(len(data)) > limit, nil
}

// ListPods are the pods the API server binds to node.
func ListPods(ctx context.Context, client kubernetes.Interface, node string) ([]corev1.Pod, error) {
	list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	// The field selector is the API server's; a pod of another node is still never this one's.
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != node }), nil
}

// maxPodList bounds a pod list read from a file (kubectl get pods -o json).
const maxPodList = 64 << 20

// ReadPodList reads a v1 PodList (kubectl get pods -o json), bounded.
func ReadPodList(path string) ([]corev1.Pod, error) {
	data, long, err := readAtMost(path, maxPodList)
	if err != nil {
		return nil, err
	}
	if long {
		return nil, fmt.Errorf("%s: a pod list longer than %d bytes", path, maxPodList)
	}
	var list corev1.PodList
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: not a pod list: %w", path, err)
	}
	return list.Items, nil
}

// FixedNamespaces are namespaces' labels as listed once (the reconcile mode lists them each
// round).
type FixedNamespaces map[string]map[string]string

// Labels tells a listed namespace's labels.
func (n FixedNamespaces) Labels(namespace string) (map[string]string, bool) {
	l, ok := n[namespace]
	return l, ok
}

// Synced: a list is complete once made.
func (n FixedNamespaces) Synced() bool { return n != nil }

// ListNamespaces lists the namespaces' labels.
func ListNamespaces(ctx context.Context, client kubernetes.Interface) (FixedNamespaces, error) {
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := FixedNamespaces{}
	for _, ns := range list.Items {
		out[ns.Name] = ns.Labels
	}
	return out, nil
}
