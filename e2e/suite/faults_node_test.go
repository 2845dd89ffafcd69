package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// onNode keeps a burst on one node's cards.
func onNode(node string, cards int) map[string]string {
	uuids := make([]string, cards)
	for i := range uuids {
		uuids[i] = fmt.Sprintf("GPU-%s-%d", node, i)
	}
	return map[string]string{api.AnnotationGPUUUIDInclude: strings.Join(uuids, ",")}
}

// waitRunning waits until at least n pods of the namespace run.
func waitRunning(t *testing.T, namespace string, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return runningCount(namespace) >= n, nil
	}); err != nil {
		t.Fatalf("fewer than %d pods running in %s", n, namespace)
	}
}

// restartKubelet kills the node's kubelet (its containers stay in the CRI, as in a
// container runtime), starts it again and waits until the node is ready.
func restartKubelet(t *testing.T, node string) {
	t.Helper()
	cl.KillKubelet(node)
	if err := cl.StartKubelet(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitNodeReady(context.Background(), node, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// The kubelet of gpu-c is killed while pods run there and started again: the pods keep
// running, unrestarted, and its device checkpoint still agrees with every assignment.
// Then it is killed again in the middle of admitting a second burst: every pod of that
// burst runs with exactly its cards, or failed with a reason.
func TestFaultKubeletRestart(t *testing.T) {
	n := ns(t, "fault-kubelet")
	defer cleanup(t, n)
	first := burst(n, "r", 8, onNode("gpu-c", 4))
	submit(t, first...)
	before := waitAllRunning(t, n, first, 2*time.Minute)
	start := time.Now()
	restartKubelet(t, "gpu-c")
	t.Logf("kubelet of gpu-c restarted under %d running pods; node ready again in %s", len(before), time.Since(start).Round(100*time.Millisecond))
	after := waitAllRunning(t, n, first, time.Minute)
	uids := map[types.UID]bool{}
	for _, p := range before {
		uids[p.UID] = true
	}
	for _, p := range after {
		if !uids[p.UID] {
			t.Errorf("pod %s was replaced across the kubelet restart", p.Name)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				t.Errorf("pod %s container %s restarted %d times", p.Name, s.Name, s.RestartCount)
			}
		}
	}
	checkHandoff(t, after)

	second := burst(n, "m", 8, onNode("gpu-c", 4))
	submit(t, second...)
	waitRunning(t, n, len(first)+1)
	restartKubelet(t, "gpu-c")
	t.Logf("kubelet of gpu-c restarted mid-admission with %d pods running", runningCount(n))
	checkBurstOutcome(t, n, second)
	noOvercommit(t)
}

// checkBurstOutcome waits until every pod of the jobs runs or failed: a failed pod must
// say why, a running one must have exactly its cards.
func checkBurstOutcome(t *testing.T, namespace string, jobs []*batchv1alpha1.Job) {
	t.Helper()
	var running []corev1.Pod
	settled := func(pods []corev1.Pod) bool {
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodFailed {
				return false
			}
		}
		return len(pods) > 0
	}
	failed := map[string]int{}
	for _, j := range jobs {
		pods, err := workload.WaitPods(context.Background(), cl.Client, namespace, j.Name, 3*time.Minute, settled)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, p := range pods {
			switch {
			case p.Status.Phase == corev1.PodRunning:
				running = append(running, p)
			case p.Status.Reason == "" || p.Status.Message == "":
				t.Errorf("pod %s failed without a reason", p.Name)
			default:
				failed[p.Status.Reason+": "+p.Status.Message]++
			}
		}
	}
	t.Logf("%d pods running, failed: %v", len(running), failed)
	checkHandoff(t, running)
}

// Forty pods are bound to one node and its agent is killed while the kubelet admits
// them, then started again. The kubelet refuses the pods it admits while the plugin is
// away (UnexpectedAdmissionError: its devices are unhealthy until the plugin registers
// again); every other pod runs with exactly its cards, none over-committed, and nothing
// a running container uses was removed from the host.
func TestFaultAgentKilledMidBurstOnOneNode(t *testing.T) {
	n := ns(t, "fault-agent-one")
	defer cleanup(t, n)
	jobs := burst(n, "a", 40, onNode("gpu-a", 8))
	submit(t, jobs...)
	waitRunning(t, n, 5)
	cl.KillAgent("gpu-a")
	t.Logf("agent of gpu-a killed with %d of 40 pods running", runningCount(n))
	if err := cl.StartAgent(context.Background(), "gpu-a"); err != nil {
		t.Fatal(err)
	}
	checkBurstOutcome(t, n, jobs)
	pods, err := cl.Client.CoreV1().Pods(n).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "gpu-a" {
			t.Errorf("pod %s bound to %q", p.Name, p.Spec.NodeName)
		}
	}
	noOvercommit(t)
}

// The scheduler is killed between two binds of a 16-member gang and started again. The
// harness's proxy in front of the API server lets the first 5 binds of the namespace
// through and holds the rest; the kill drops the held ones, so 5 of the 16 members are
// bound (not yet handed off, perhaps) and 11 are not, and the restarted scheduler must
// rebuild its card ledger from the API server. The bound members keep their nodes and
// cards, the gang ends whole, and a second, identical gang then takes exactly the
// capacity left (each member half an A100's memory): a ledger that missed the first
// gang's bound members would over-commit cards.
func TestFaultSchedulerRestartMidGang(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "fault-gang")
	defer cleanup(t, n)
	defer cl.OpenBinds()
	const members, pass = 16, 5
	gang := func(name string) *batchv1alpha1.Job {
		return workload.Job(n, name, "default", members, workload.Task{Name: "w", Replicas: members,
			Annotations: map[string]string{api.AnnotationGPUTypeInclude: "A100"},
			Containers:  []workload.Container{{Name: "main", Cards: 1, MemPct: 50, Cores: 40}}})
	}
	cl.BindGate(n, pass)
	submit(t, gang("first"))
	var bound map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		held, _ := cl.HeldBinds()
		bound = boundMembers(ctx, n, "first")
		return len(bound) == pass && held > 0, nil
	}); err != nil {
		held, _ := cl.HeldBinds()
		t.Fatalf("want %d members bound and a bind held in the proxy, have %d bound, %d held", pass, len(bound), held)
	}
	start := time.Now()
	cl.KillScheduler()
	var held, dropped int
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		held, dropped = cl.HeldBinds()
		return held == 0 && dropped > 0, nil
	}); err != nil {
		t.Fatalf("the killed scheduler's held binds were not dropped: %d held, %d dropped", held, dropped)
	}
	bound = boundMembers(ctx, n, "first")
	if len(bound) == 0 || len(bound) >= members {
		t.Fatalf("the kill did not land between two binds of the gang: %d of %d bound", len(bound), members)
	}
	t.Logf("scheduler killed between two binds of the gang: %d of %d members bound, %d binds held and dropped with it",
		len(bound), members, dropped)
	cl.OpenBinds()
	if err := cl.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := workload.WaitPods(ctx, cl.Client, n, "first", 3*time.Minute, workload.AllPhase(members, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the gang is whole again %s after the kill", time.Since(start).Round(100*time.Millisecond))
	for _, p := range first {
		if was, ok := bound[p.Name]; ok && was != p.Spec.NodeName+" "+p.Annotations[api.AnnotationAssignment] {
			t.Errorf("member %s bound before the kill moved: was %s, now on %s with %s", p.Name, was, p.Spec.NodeName,
				p.Annotations[api.AnnotationAssignment])
		}
	}
	submit(t, gang("second"))
	second, err := workload.WaitPods(ctx, cl.Client, n, "second", 3*time.Minute, workload.AllPhase(members, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkHandoff(t, append(first, second...))
	noOvercommit(t)
}

// boundMembers maps each bound pod of the job to its node and assignment.
func boundMembers(ctx context.Context, namespace, job string) map[string]string {
	pods, _ := workload.Pods(ctx, cl.Client, namespace, job)
	out := map[string]string{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			out[p.Name] = p.Spec.NodeName + " " + p.Annotations[api.AnnotationAssignment]
		}
	}
	return out
}
