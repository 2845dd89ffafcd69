package suite

import (
	"context"
	"fmt"
	"io/fs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// realNodes run real containers: kubelet v1.34 on containerd v2.2 and runc v1.5, in one
// mount and PID namespace each (cluster.RuntimeContainerd), added by the scenario that
// uses them and removed after it, so that every other scenario keeps the four in-memory
// nodes' 24 cards. gpu-r1's agent hands cards over by environment, gpu-r2's as CDI devices.
var realNodes = []cluster.Node{
	{Name: "gpu-r1", Machine: "l40sx2", Runtime: cluster.RuntimeContainerd},
	{Name: "gpu-r2", Machine: "l40sx2", Runtime: cluster.RuntimeContainerd, AgentArgs: []string{"--card-handoff=cdi"}},
}

// requireRealRuntime skips a scenario when the real runtime could not be built here
// (libseccomp's headers missing), or fails it where TESSERA_E2E_REQUIRE_REAL_RUNTIME=1
// (CI installs them).
func requireRealRuntime(t *testing.T) {
	t.Helper()
	if why := cl.Opts.Bin.Runtime.Missing; why != "" {
		if os.Getenv("TESSERA_E2E_REQUIRE_REAL_RUNTIME") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// Real containers on both handoff modes. On each real-runtime node a pod of two containers
// runs vgpu-probe, a CUDA program on vgpu-core's stub driver, which the fake toolkit mounts
// as NVIDIA's toolkit mounts the driver (CDI; in env mode NVIDIA_VISIBLE_DEVICES turned into
// the same CDI devices, as nvidia-container-runtime does): "root" (1 card, 3000 MiB, its pod
// spec setting TESSERA_MEMORY_LIMIT_MIB=0) and "user" (2 cards, 2000 MiB each, runAsUser
// 1000, TESSERA_MEMORY_LIMIT_MIB=999999). For each container: the hook library is in the
// probe's memory map (read from the host through the node's PID namespace), the CUDA devices'
// UUIDs are exactly the assignment's, cuMemGetInfo reports the assigned limit, one process
// holding a third of the limit and another filling the card until refused add up to the
// limit to the byte (with the context footprint the agent counts per process), the limits
// file cannot be opened for writing, the device nodes are the cards', and the region is on
// the pod's memory-backed region volume (the admission webhook added it), where a fallocate
// of 1 GiB is refused; the node's state directory holds nothing a container can write. Then gpu-r1's
// kubelet is killed and started again: the containers keep running (same processes), and the
// pod keeps its UID without a restart. Then the hook library is upgraded with the chart's own
// install-hook-library command, rendered by Helm, over and over while new probes start
// (hookUpgradeKeepsRunningContainers). Then gpu-r2's agent is killed while its probes hold
// memory and started again with the node's flags: same processes, no restart, the new agent's
// metrics show both containers' hook and memory again, and a pod admitted on gpu-r2 after it
// gets its handoff (a probe that passes the checks above). Last, every process of gpu-r1's
// "user" container is killed from the host: the kubelet restarts it in its pod (restartPolicy
// OnFailure) from its checkpointed allocation, and the new run sees the same UUIDs and limits.
func TestRealContainersLoadTheHookAndHoldTheirLimits(t *testing.T) {
	requireRealRuntime(t)
	ctx := context.Background()
	for _, n := range realNodes {
		start := time.Now()
		if err := cl.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cl.RemoveNode(ctx, n.Name); err != nil {
				t.Errorf("remove %s: %v", n.Name, err)
			}
		}()
		t.Logf("%s (%s handoff) up, Ready with its inventory, in %s", n.Name, handoffOf(n), time.Since(start).Round(100*time.Millisecond))
	}
	namespace := ns(t, "real-runtime")
	defer cleanup(t, namespace)
	// Tessera's admission webhook, on by default in the chart, gives the probe pods their
	// region volume (the containers' regions live there, in the pods' own memory).
	nsObj, err := cl.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels[cluster.AdmissionLabel] = "on"
	if _, err := cl.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	adm, err := cl.StartAdmission(ctx, admissionConfig)
	if err != nil {
		t.Fatalf("start tessera-admission: %v", err)
	}
	defer adm.Stop()
	start := time.Now()
	for _, n := range realNodes {
		submit(t, probeJob(namespace, n.Name))
	}
	var pods []corev1.Pod
	for _, n := range realNodes {
		p, err := workload.WaitPods(ctx, cl.Client, namespace, "probe-"+n.Name, 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p...)
	}
	t.Logf("both probe pods Running %s after submission", time.Since(start).Round(100*time.Millisecond))
	h := handed(t)
	pids := map[string]int{}
	probes := map[string]seenProbe{}
	for _, p := range pods {
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for _, ca := range a.Containers {
			r, ok := h.Records[string(p.UID)+"/"+ca.Name]
			if !ok {
				t.Errorf("%s/%s: no record from the runtime", p.Name, ca.Name)
				continue
			}
			out, log, err := readProbe(p, ca.Name, time.Minute)
			if err != nil {
				t.Errorf("%v\n%s", err, log)
				continue
			}
			t.Logf("%s/%s on %s: %s", p.Name, ca.Name, p.Spec.NodeName, summary(out))
			for _, b := range checkProbe(out, ca, r) {
				t.Errorf("%s/%s on %s (%s handoff): %s", p.Name, ca.Name, p.Spec.NodeName, workload.HandoffMode(r), b)
			}
			pid, err := containerProcess(r.ID, cluster.ProbePath)
			if err != nil {
				t.Errorf("%s/%s: %v", p.Name, ca.Name, err)
				continue
			}
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
			if err != nil || !strings.Contains(string(maps), cl.HookLibrary()) {
				t.Errorf("%s/%s: the hook library %s is not in the memory map of the probe (host pid %d): %v",
					p.Name, ca.Name, cl.HookLibrary(), pid, err)
			}
			pids[p.Spec.NodeName+"/"+ca.Name] = pid
			probes[p.Spec.NodeName+"/"+ca.Name] = seenProbe{out: out, ca: ca, record: r}
			checkAgentSees(t, p, ca.Name, out, r)
		}
	}
	for _, n := range realNodes {
		checkNothingWritableOnTheHost(t, n.Name)
	}
	for _, n := range realNodes {
		ctrd, shims, count := cl.RuntimeRSS(n.Name)
		t.Logf("%s resident: kubelet %d MiB, containerd %d MiB, %d shims %d MiB", n.Name, cl.KubeletRSS()[n.Name]>>20,
			ctrd>>20, count, shims>>20)
	}
	kubeletRestartKeepsContainers(t, "gpu-r1", pods[0], pids)
	newLib := hookUpgradeKeepsRunningContainers(t, namespace, pids)
	agentRestartKeepsContainers(t, namespace, "gpu-r2", pods[1], pids, probes, newLib)
	containerRestartKeepsLimits(t, pods[0], "user", probes["gpu-r1/user"])
	forceDeleteWhileStartingLeavesNothing(t, namespace)
	aFIFORegionLeavesTheAgentServing(t, namespace, pods[0])
	aTruncatedRegionFailsClosed(t, namespace, pods[0])
	uninstallKeepsRunningContainers(t, namespace, pods[0])
}

// aFIFORegionLeavesTheAgentServing runs a tenant's attack on the node agent from inside a
// real container: the container replaces its region on its pod's volume with a FIFO, which
// a reader opening it blocking would hang on. The agent's scrapes still answer at once,
// refuse that region (counted as not_regular_file, readable 0) and still report the
// other containers of the node exactly.
func aFIFORegionLeavesTheAgentServing(t *testing.T, namespace string, neighbour corev1.Pod) {
	t.Helper()
	p, line := runAttacker(t, namespace, "attacker", "probe attack fifo ", "attack")
	if !strings.Contains(line, " ok CUDA_SUCCESS") {
		t.Fatalf("%s: %q; want its region replaced by a FIFO after an allocation", p.Name, line)
	}
	before, after := agentRefusesTheRegion(t, p, neighbour, "not_regular_file")
	t.Logf("%s replaced its region with a FIFO; gpu-r1's agent kept answering, refused it (not_regular_file %v -> %v), and still reports %s",
		p.Name, before, after, neighbour.Name)
}

// aTruncatedRegionFailsClosed runs a tenant's attack on its own container's accounting
// from inside a real container: while one process holds memory, the region is cut to one
// page, as a tenant would to wipe the counters behind it, and a second process starts.
// The hook library refuses the cut region (the second process's cuInit fails: fail
// closed, where rebuilding the region would have zeroed what the first one holds), and
// the node agent counts the region as the wrong size, keeps answering and still reports
// the node's other containers.
func aTruncatedRegionFailsClosed(t *testing.T, namespace string, neighbour corev1.Pod) {
	t.Helper()
	p, line := runAttacker(t, namespace, "cutter", "probe attack truncate ", "attack", "truncate")
	switch {
	case !strings.Contains(line, " ok first[probe hold ") || !strings.Contains(line, " CUDA_SUCCESS] second["):
		t.Fatalf("%s: %q; want the region cut to a page under a process that holds memory", p.Name, line)
	case !strings.Contains(line, "second[probe error cuInit ") || strings.HasSuffix(line, " exit=0"):
		t.Errorf("%s: %q; want the second process refused at cuInit: the library must not rebuild a cut region", p.Name, line)
	}
	before, after := agentRefusesTheRegion(t, p, neighbour, "size")
	t.Logf("%s cut its region under a holder (%s); gpu-r1's agent kept answering, refused it (size %v -> %v), and still reports %s",
		p.Name, line, before, after, neighbour.Name)
}

// runAttacker runs vgpu-probe with args as a one-container probe pod named name on gpu-r1
// and returns the pod and the line of its log that begins with prefix.
func runAttacker(t *testing.T, namespace, name, prefix string, args ...string) (corev1.Pod, string) {
	t.Helper()
	ctx := context.Background()
	j := probeJob(namespace, "gpu-r1")
	j.Name = name
	spec := &j.Spec.Tasks[0].Template.Spec
	spec.Containers = spec.Containers[:1]
	spec.Containers[0].Command = append([]string{cluster.ProbePath}, args...)
	submit(t, j)
	ps, err := workload.WaitPods(ctx, cl.Client, namespace, j.Name, 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	var line string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(probeLog(p, spec.Containers[0].Name, 0))
		for _, l := range strings.Split(string(b), "\n") {
			if i := strings.Index(l, prefix); i >= 0 {
				line = l[i:]
			}
		}
		return line != "", nil
	}); err != nil {
		t.Fatalf("%s: the attacker never said what it did", p.Name)
	}
	return p, line
}

// agentRefusesTheRegion checks gpu-r1's agent against the attacker p's region: three
// scrapes in a row each answer within 5 s with the region unreadable, the refusals of
// reason grow, and the neighbour's hook is still reported. It returns the refusals
// before and after.
func agentRefusesTheRegion(t *testing.T, p, neighbour corev1.Pod, reason string) (float64, float64) {
	t.Helper()
	ctx := context.Background()
	errsBefore, _ := agentSeries(ctx, "gpu-r1", "tessera_agent_region_read_errors_total{", `reason="`+reason+`"`)
	for i := 0; i < 3; i++ { // every scrape answers: none waits on the region
		start := time.Now()
		readable, err := agentSeries(ctx, "gpu-r1", "tessera_container_region_readable{", `pod="`+p.Name+`"`)
		if err != nil {
			t.Fatalf("scrape %d of gpu-r1's agent with %s's region refused (%s): %v", i+1, p.Name, reason, err)
		}
		if took := time.Since(start); took > 5*time.Second || len(readable) != 1 || sum(readable) != 0 {
			t.Errorf("scrape %d: %s, %s's region readable %v; want an answer within 5 s and 0", i+1, took, p.Name, readable)
		}
	}
	errsAfter, _ := agentSeries(ctx, "gpu-r1", "tessera_agent_region_read_errors_total{", `reason="`+reason+`"`)
	if sum(errsAfter) <= sum(errsBefore) {
		t.Errorf("%s refusals %v before, %v after: %s's region was not counted", reason, sum(errsBefore), sum(errsAfter), p.Name)
	}
	hook, err := agentSeries(ctx, "gpu-r1", "tessera_container_hook_loaded{", `pod="`+neighbour.Name+`"`)
	if err != nil || len(hook) == 0 || sum(hook) != float64(len(hook)) {
		t.Errorf("the neighbour %s's hook metrics beside %s: %v (%v)", neighbour.Name, p.Name, hook, err)
	}
	return sum(errsBefore), sum(errsAfter)
}

// forceDeleteWhileStartingLeavesNothing force-deletes probe pods (grace 0, as `kubectl
// delete --force`) on both real-runtime nodes the moment they are bound, while the kubelet
// sets up their sandbox and containerd and runc start their container and Volcano's job
// controller makes replacements. Afterwards no kubelet has exited, both nodes are Ready,
// each node runs exactly the shims (pod sandboxes) it ran before, and a probe pod started
// after the churn gets its cards and limits (the probe's checks): nothing the deleted pods
// held stays held.
func forceDeleteWhileStartingLeavesNothing(t *testing.T, namespace string) {
	t.Helper()
	ctx := context.Background()
	crashedBefore := len(cl.KubeletExits())
	shimsBefore := map[string]int{}
	for _, n := range realNodes {
		_, _, shimsBefore[n.Name] = cl.RuntimeRSS(n.Name)
	}
	for _, n := range realNodes {
		j := probeJob(namespace, n.Name)
		j.Name = "churn-" + n.Name
		spec := &j.Spec.Tasks[0].Template.Spec
		spec.Containers = spec.Containers[:1]
		j.Spec.Tasks[0].Replicas = 2
		submit(t, j)
	}
	seen := map[types.UID]bool{}
	deleted := 0
	for deadline := time.Now().Add(90 * time.Second); deleted < 8 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		list, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Name, "churn-") || p.Spec.NodeName == "" || seen[p.UID] || p.DeletionTimestamp != nil {
				continue
			}
			seen[p.UID] = true
			uid := p.UID
			err := cl.Client.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0)),
				Preconditions: &metav1.Preconditions{UID: &uid}})
			if err == nil {
				deleted++
			} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				t.Fatalf("force-deleting %s: %v", p.Name, err)
			}
		}
	}
	t.Logf("force-deleted %d probe pods on the real runtime the moment they were bound", deleted)
	if deleted < 4 {
		t.Errorf("only %d pods force-deleted: the churn did not run", deleted)
	}
	for _, n := range realNodes {
		if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, "churn-"+n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range cl.KubeletExits()[crashedBefore:] {
		t.Errorf("the kubelet of %s exited by itself (%s) during the churn; its log %s ends:\n%s", e.Node, e.Status, e.Log, e.Tail)
	}
	settled := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "churn-") {
				return false, nil
			}
		}
		for _, n := range realNodes {
			if _, _, shims := cl.RuntimeRSS(n.Name); shims != shimsBefore[n.Name] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		got := map[string]int{}
		for _, n := range realNodes {
			_, _, got[n.Name] = cl.RuntimeRSS(n.Name)
		}
		t.Fatalf("after the churn: churn pods or pod sandboxes remain (shims %v, before %v)", got, shimsBefore)
	}
	t.Logf("the churn's pods are gone and each node runs the shims it ran before, %s after the jobs' deletion",
		time.Since(settled).Round(100*time.Millisecond))
	for _, n := range realNodes {
		if err := cl.WaitNodeReady(ctx, n.Name, time.Minute); err != nil {
			t.Errorf("after the churn: %v", err)
		}
	}
	// A pod after the churn, on the node whose cards the deleted pods were given.
	j := probeJob(namespace, "gpu-r1")
	j.Name = "after-churn"
	spec := &j.Spec.Tasks[0].Template.Spec
	spec.Containers = spec.Containers[:1]
	submit(t, j)
	ps, err := workload.WaitPods(ctx, cl.Client, namespace, j.Name, 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkOneProbe(t, ps[0], "after the churn")
}

// checkOneProbe runs the probe's checks on a pod of one probe container and returns the
// container's runtime record; when is what the messages say of the moment.
func checkOneProbe(t *testing.T, p corev1.Pod, when string) workload.CRIRecord {
	t.Helper()
	a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
	if err != nil || len(a.Containers) != 1 {
		t.Fatalf("%s: assignment %+v: %v", p.Name, a, err)
	}
	r, ok := handed(t).Records[string(p.UID)+"/"+a.Containers[0].Name]
	if !ok {
		t.Fatalf("%s: no record from the runtime", p.Name)
	}
	out, log, err := readProbe(p, a.Containers[0].Name, time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	t.Logf("%s/%s on %s %s: %s", p.Name, a.Containers[0].Name, p.Spec.NodeName, when, summary(out))
	for _, b := range checkProbe(out, a.Containers[0], r) {
		t.Errorf("%s/%s on %s %s: %s", p.Name, a.Containers[0].Name, p.Spec.NodeName, when, b)
	}
	return r
}

// seenProbe is what a probe container printed, its assignment and its runtime record.
type seenProbe struct {
	out    *probeOutput
	ca     api.ContainerAssignment
	record workload.CRIRecord
}

// agentRestartKeepsContainers kills the node's agent while the probes hold memory and
// starts it again with the harness's flags for the node: the containers' processes are the
// same (host pids with their start times), the pod keeps its UID without a container
// restart, the new agent's metrics show each container's hook loaded and exactly the memory
// its process holds, and a pod admitted on the node after the restart gets its handoff (a
// probe container that sees its assigned cards and limits).
func agentRestartKeepsContainers(t *testing.T, namespace, node string, pod corev1.Pod, pids map[string]int, probes map[string]seenProbe, lib uint64) {
	t.Helper()
	ctx := context.Background()
	started := map[string]string{}
	for k, pid := range pids {
		started[k] = processStart(pid)
	}
	// The agent's log, which the harness appends to across restarts, says when it has
	// registered its device plugin with the kubelet.
	agentLog := filepath.Join(cl.LogDir(), "agent-"+node+".log")
	registered := func() int {
		b, _ := os.ReadFile(agentLog)
		return strings.Count(string(b), "Registered with the kubelet")
	}
	before := registered()
	start := time.Now()
	cl.KillAgent(node)
	if err := cl.StartAgent(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return registered() > before, nil
	}); err != nil {
		t.Fatalf("the restarted agent of %s never registered with the kubelet (%s)", node, agentLog)
	}
	if err := cl.WaitNodeReady(ctx, node, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent of %s killed and started again: registered with the kubelet, its Node Ready, %s later", node,
		time.Since(start).Round(100*time.Millisecond))
	checkSurvived(ctx, t, pod, pids, started, "agent", true)
	seen := time.Now()
	for _, c := range pod.Spec.Containers {
		if sp, ok := probes[node+"/"+c.Name]; ok {
			checkAgentSees(t, pod, c.Name, sp.out, sp.record)
		}
	}
	t.Logf("the restarted agent of %s reports both containers' hook and memory %s after the check began",
		node, time.Since(seen).Round(100*time.Millisecond))
	// A pod admitted after the restart: one probe container ("root", 1 card, 3000 MiB).
	start = time.Now()
	j := probeJob(namespace, node)
	j.Name = "after-" + node
	spec := &j.Spec.Tasks[0].Template.Spec
	spec.Containers = spec.Containers[:1]
	submit(t, j)
	ps, err := workload.WaitPods(ctx, cl.Client, namespace, j.Name, 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	t.Logf("pod %s admitted on %s after the agent restart, Running %s after submission", p.Name, p.Spec.NodeName,
		time.Since(start).Round(100*time.Millisecond))
	if p.Spec.NodeName != node {
		t.Fatalf("pod %s ran on %s, not %s", p.Name, p.Spec.NodeName, node)
	}
	checkHandoff(t, ps)
	r := checkOneProbe(t, p, "after the agent restart")
	// Started after the hook library was upgraded: it maps the new file.
	if pid, err := containerProcess(r.ID, cluster.ProbePath); err != nil {
		t.Errorf("%s: %v", p.Name, err)
	} else if got := hookInode(pid); got != lib {
		t.Errorf("%s (host pid %d), started after the upgrade, maps hook library inode %d, want the new file's %d", p.Name, pid, got, lib)
	}
}

// containerRestartKeepsLimits kills every process of one probe container from the host; the
// kubelet restarts it in the same pod (restartPolicy OnFailure) from the device manager's
// checkpointed allocation, without asking the agent again, and the new run sees the same
// cards and limits (the probe's checks all over again).
func containerRestartKeepsLimits(t *testing.T, pod corev1.Pod, container string, sp seenProbe) {
	t.Helper()
	if sp.out == nil {
		t.Fatalf("%s/%s: no probe output to compare with", pod.Name, container)
	}
	ctx := context.Background()
	start := time.Now()
	killed, err := killContainer(sp.record.ID)
	if err != nil {
		t.Fatal(err)
	}
	var restarted corev1.Pod
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cl.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == container {
				last = fmt.Sprintf("%d restarts, state %+v", s.RestartCount, s.State)
				restarted = *p
				return s.RestartCount == 1 && s.State.Running != nil, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s/%s was not restarted after its %d processes were killed: %s", pod.Name, container, killed, last)
	}
	t.Logf("%s/%s: %d processes killed, restarted and Running %s later", pod.Name, container, killed,
		time.Since(start).Round(100*time.Millisecond))
	if restarted.UID != pod.UID {
		t.Errorf("pod %s was replaced, not its container restarted", pod.Name)
	}
	out, log, err := readProbeRun(restarted, container, 1, time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	t.Logf("%s/%s after its restart: %s", pod.Name, container, summary(out))
	if !slices.Equal(out.uuids, sp.out.uuids) {
		t.Errorf("%s/%s after its restart: CUDA devices %v, before %v", pod.Name, container, out.uuids, sp.out.uuids)
	}
	for _, c := range sp.ca.Cards {
		if got := out.meminfo[c.UUID][1]; got != uint64(c.MemoryMiB)<<20 {
			t.Errorf("%s/%s after its restart: cuMemGetInfo total %d on %s, want the assigned %d MiB", pod.Name, container,
				got, c.UUID, c.MemoryMiB)
		}
	}
	for _, b := range checkProbe(out, sp.ca, sp.record) {
		t.Errorf("%s/%s after its restart: %s", pod.Name, container, b)
	}
}

// kubeletRestartKeepsContainers kills the node's kubelet and starts it again: the
// containers' processes (host pids, with their start times) outlive it, and the pod keeps
// its UID and runs without a container restart.
func kubeletRestartKeepsContainers(t *testing.T, node string, pod corev1.Pod, pids map[string]int) {
	t.Helper()
	ctx := context.Background()
	started := map[string]string{}
	for k, pid := range pids {
		started[k] = processStart(pid)
	}
	cl.KillKubelet(node)
	for k, pid := range pids {
		if strings.HasPrefix(k, node+"/") && (started[k] == "" || processStart(pid) != started[k]) {
			t.Errorf("%s: the container's process %d did not outlive the kubelet", k, pid)
		}
	}
	start := time.Now()
	if err := cl.StartKubelet(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitNodeReady(ctx, node, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The Node was Ready all along: the new kubelet is back once it has listed the
	// runtime's containers (PLEG relists every second) a few times.
	var relists float64
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		relists = kubeletMetric(ctx, node, "kubelet_pleg_relist_duration_seconds_count")
		return relists >= 3, nil
	}); err != nil {
		t.Fatalf("the restarted kubelet of %s never listed the containers: %v", node, err)
	}
	t.Logf("kubelet of %s killed and started again: %.0f relists of the runtime's containers %s later", node, relists,
		time.Since(start).Round(100*time.Millisecond))
	checkSurvived(ctx, t, pod, pids, started, "kubelet", false)
}

// checkSurvived checks that pod and its containers' processes (pids, with the start
// times recorded before) outlived the restart of what: the same pod, no container
// restarted, the same processes. With unknownIsGone a process whose start time could not
// be read before counts as gone.
func checkSurvived(ctx context.Context, t *testing.T, pod corev1.Pod, pids map[string]int, started map[string]string, what string, unknownIsGone bool) {
	t.Helper()
	after, err := workload.WaitPods(ctx, cl.Client, pod.Namespace, pod.Labels["volcano.sh/job-name"], time.Minute,
		workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	if after[0].UID != pod.UID {
		t.Errorf("pod %s was replaced across the %s restart", pod.Name, what)
	}
	for _, s := range after[0].Status.ContainerStatuses {
		if s.RestartCount > 0 || s.State.Running == nil {
			t.Errorf("pod %s container %s after the %s restart: %d restarts, state %+v", pod.Name, s.Name, what, s.RestartCount, s.State)
		}
	}
	for k, pid := range pids {
		if unknownIsGone && started[k] == "" || processStart(pid) != started[k] {
			t.Errorf("%s: the container's process %d is gone after the %s restart", k, pid, what)
		}
	}
}

// checkAgentSees checks the node agent's metrics for a probe container while its last
// process holds memory on device 0: the hook library loaded, one live process in the
// region (the agent finds it in the container's own PID namespace by start time and
// innermost pid), and exactly its memory and context used on the card.
func checkAgentSees(t *testing.T, p corev1.Pod, container string, o *probeOutput, r workload.CRIRecord) {
	t.Helper()
	var card string
	for u, f := range o.fill {
		if f.ordinal == 0 {
			card = u
		}
	}
	want := float64(o.kept.bytes + contextReserve(r))
	who := []string{`pod="` + p.Name + `"`, `container="` + container + `"`}
	var last, failed string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		used, err := agentSeries(ctx, p.Spec.NodeName, "tessera_container_gpu_memory_used_bytes{", append(who, `uuid="`+card+`"`)...)
		if err != nil {
			failed = err.Error() // kept apart: the last figures seen say more than the last failed scrape
			return false, nil
		}
		loaded, _ := agentSeries(ctx, p.Spec.NodeName, "tessera_container_hook_loaded{", who...)
		procs, _ := agentSeries(ctx, p.Spec.NodeName, "tessera_container_gpu_processes{", who...)
		last = fmt.Sprintf("used %v, hook loaded %v, processes %v", used, loaded, procs)
		return len(used) == 1 && sum(used) == want && sum(loaded) == 1 && sum(procs) == 1, nil
	})
	if err == nil {
		return
	}
	t.Errorf("%s/%s: the agent's metrics while one process holds %d bytes (and a context of %d) on %s: last seen %q; last failed scrape %q",
		p.Name, container, o.kept.bytes, contextReserve(r), card, last, failed)
}

// checkNothingWritableOnTheHost checks that the agent's state directory of a node whose
// containers ran holds only read-only limits files and the agent's own records: nothing a
// container can write (and so grow) is on the host.
func checkNothingWritableOnTheHost(t *testing.T, node string) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(cl.StateDir(node), "pods"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Name() == "limits.env" && info.Mode().Perm() == 0o444:
		case strings.HasSuffix(d.Name(), ".alloc.json") && info.Mode().Perm() == 0o600:
		default:
			t.Errorf("%s: the agent's state directory holds %s (%v), which a container could write", node, path, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Errorf("%s: walking the agent's state directory: %v", node, err)
	}
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// contextReserve is what vgpu-core counts for each CUDA context, from the limits file.
func contextReserve(r workload.CRIRecord) uint64 {
	mib, _ := strconv.ParseUint(r.LimitsFile[api.EnvContextReserveMiB], 10, 64)
	return mib << 20
}

// probeJob is a one-pod job on node whose containers run vgpu-probe (see the scenario).
func probeJob(namespace, node string) *batchv1alpha1.Job {
	j := workload.Job(namespace, "probe-"+node, "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: []workload.Container{
		{Name: "root", Cards: 1, MemMiB: 3000, Cores: 30}, {Name: "user", Cards: 2, MemMiB: 2000, Cores: 20}}})
	spec := &j.Spec.Tasks[0].Template.Spec
	spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	grace := int64(5)
	spec.TerminationGracePeriodSeconds = &grace
	// A probe killed from the host is restarted in its pod (containerRestartKeepsLimits).
	spec.RestartPolicy = corev1.RestartPolicyOnFailure
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.Image, c.ImagePullPolicy, c.Command = cluster.ProbeImage, corev1.PullNever, nil
	}
	for i := range spec.Containers {
		spec.Containers[i].Env = []corev1.EnvVar{{Name: api.EnvMemoryLimitMiB, Value: podMemoryEnv[spec.Containers[i].Name]}}
	}
	user := int64(1000)
	spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: &user, RunAsGroup: &user, RunAsNonRoot: ptr(true)}
	return j
}

// checkProbe compares what the probe saw with the container's assignment and handoff.
func checkProbe(o *probeOutput, ca api.ContainerAssignment, r workload.CRIRecord) []string {
	var bad []string
	fail := func(f string, a ...any) { bad = append(bad, fmt.Sprintf(f, a...)) }
	limits := map[string]uint64{}
	var want, nodes []string
	for _, c := range ca.Cards {
		limits[c.UUID] = uint64(c.MemoryMiB) << 20
		want = append(want, c.UUID)
		index, _ := strconv.Atoi(c.UUID[strings.LastIndex(c.UUID, "-")+1:]) // the fake machine's driver UUIDs
		nodes = append(nodes, "/dev/nvidia"+strconv.Itoa(index))
	}
	if got := slices.Sorted(slices.Values(o.uuids)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		fail("the CUDA devices are %v, the assignment's cards %v", o.uuids, want)
	}
	if got := slices.Sorted(slices.Values(o.devices)); !slices.Equal(got, slices.Sorted(slices.Values(nodes))) {
		fail("device nodes %v, want the cards' %v", o.devices, nodes)
	}
	reserve := contextReserve(r)
	if o.hold.rc != "CUDA_SUCCESS" || o.children != "fill=0 hold=0" || o.kept.rc != "CUDA_SUCCESS" {
		fail("the holding processes: %d bytes, %s, then %d bytes, %s; children %q", o.hold.bytes, o.hold.rc,
			o.kept.bytes, o.kept.rc, o.children)
	}
	for uuid, limit := range limits {
		if m := o.meminfo[uuid]; m[1] != limit || m[0] != limit-reserve {
			fail("%s: cuMemGetInfo free %d total %d, want total %d (the assignment) and free %d (less one context)",
				uuid, m[0], m[1], limit, limit-reserve)
		}
		if o.after[uuid] != o.meminfo[uuid] {
			fail("%s: cuMemGetInfo after both processes ended %v, before %v: memory not given back", uuid, o.after[uuid], o.meminfo[uuid])
		}
		f, ok := o.fill[uuid]
		if !ok {
			fail("%s: the filling process did not report it", uuid)
			continue
		}
		held := reserve // the filling process's own context
		if f.ordinal == 0 {
			held += o.hold.bytes + reserve // the holding process's memory and context
		}
		if f.got+held != limit || f.got != f.free || f.rc != "CUDA_ERROR_OUT_OF_MEMORY" {
			fail("%s (device %d): filled %d bytes, refused with %s; cuMemGetInfo said %d free; "+
				"want %d = the limit %d less %d held by the two processes, then CUDA_ERROR_OUT_OF_MEMORY",
				uuid, f.ordinal, f.got, f.rc, f.free, limit-held, limit, held)
		}
	}
	// Root fails on the read-only mount (EROFS); another user on the file's mode first.
	if !strings.HasPrefix(o.limitsMount, "ro,") || o.limitsWrite != "EROFS" && (o.uid == "0" || o.limitsWrite != "EACCES") {
		fail("/var/run/tessera/limits.env: mounted %s, opened for writing: %s; want a read-only mount that refuses",
			o.limitsMount, o.limitsWrite)
	}
	// The region is on the pod's memory-backed region volume (the admission webhook added
	// it), and a tenant growing it fills only that volume: a fallocate of 1 GiB is refused.
	if want := api.RegionPathIn(true, ca.Name); o.region != want || o.regionFS != "tmpfs" || o.regionGrow != "ENOSPC" {
		fail("region %q on %s, a fallocate of 1 GiB on it: %s; want %s on the pod's tmpfs volume, refused with ENOSPC",
			o.region, o.regionFS, o.regionGrow, want)
	}
	// The pod spec's own TESSERA_MEMORY_LIMIT_MIB reached the process (the limits above held
	// regardless), and the hook library said it ignored it.
	if env := r.Env[api.EnvMemoryLimitMiB]; env != podMemoryEnv[ca.Name] {
		fail("the runtime gave the container %s=%q, want the pod spec's %q", api.EnvMemoryLimitMiB, env, podMemoryEnv[ca.Name])
	}
	if !slices.ContainsFunc(o.hook, func(l string) bool {
		return strings.Contains(l, "ignored environment overrides") && strings.Contains(l, api.EnvMemoryLimitMiB)
	}) {
		fail("the hook library did not say it ignored the pod's %s (its lines: %q)", api.EnvMemoryLimitMiB, o.hook)
	}
	if want := map[string]string{"root": "0", "user": "1000"}[ca.Name]; o.uid != want {
		fail("ran as uid %s, want %s", o.uid, want)
	}
	return bad
}

// podMemoryEnv is what each probe container's pod spec sets TESSERA_MEMORY_LIMIT_MIB to:
// no limit, and more than the card has.
var podMemoryEnv = map[string]string{"root": "0", "user": "999999"}

func summary(o *probeOutput) string {
	var fills []string
	for u, f := range o.fill {
		fills = append(fills, fmt.Sprintf("device %d %s: %d of %d bytes", f.ordinal, u[len(u)-4:], f.got, f.total))
	}
	slices.Sort(fills)
	return fmt.Sprintf("uid %s, cards %v, devices %v, hold %d bytes; fill %s; limits file mounted %s, write: %s; "+
		"region %s on %s, grow: %s; env %s; hook: %q", o.uid, o.uuids, o.devices, o.hold.bytes, strings.Join(fills, ", "),
		o.limitsMount, o.limitsWrite, o.region, o.regionFS, o.regionGrow, o.env, firstOf(o.hook))
}

func handoffOf(n cluster.Node) string {
	if slices.Contains(n.AgentArgs, "--card-handoff=cdi") {
		return "cdi"
	}
	return "env"
}

func firstOf(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
}
