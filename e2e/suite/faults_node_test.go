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
	"k8s.io/apimachinery/pkg/watch"
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

// The scheduler is killed at the first bind of a 16-member gang it is placing and
// started again. Volcano sends a gang's binds together, so by the kill most or all
// members are bound but none handed off yet (the log says how many): the restarted
// scheduler must rebuild its card ledger from those assignments. A second, identical
// gang then takes exactly the capacity left (each member half an A100's memory), so a
// ledger that missed the first gang would over-commit cards.
func TestFaultSchedulerRestartMidGang(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "fault-gang")
	defer cleanup(t, n)
	gang := func(name string) *batchv1alpha1.Job {
		return workload.Job(n, name, "default", 16, workload.Task{Name: "w", Replicas: 16,
			Annotations: map[string]string{api.AnnotationGPUTypeInclude: "A100"},
			Containers:  []workload.Container{{Name: "main", Cards: 1, MemPct: 50, Cores: 40}}})
	}
	w, err := cl.Client.CoreV1().Pods(n).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	submit(t, gang("first"))
	firstBind(t, w)
	cl.KillScheduler()
	pods, _ := workload.Pods(ctx, cl.Client, n, "first")
	bound := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	t.Logf("scheduler killed with %d of %d members of the first gang bound", bound, len(pods))
	if err := cl.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	submit(t, gang("second"))
	var all []corev1.Pod
	for _, name := range []string{"first", "second"} {
		pods, err := workload.WaitPods(ctx, cl.Client, n, name, 3*time.Minute, workload.AllPhase(16, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pods...)
	}
	checkHandoff(t, all)
	noOvercommit(t)
}

// firstBind returns as soon as the watch shows a pod bound to a node.
func firstBind(t *testing.T, w watch.Interface) {
	t.Helper()
	defer w.Stop()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("pod watch ended before a bind")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && p.Spec.NodeName != "" {
				return
			}
		case <-timeout:
			t.Fatal("no gang member bound within 2 minutes")
		}
	}
}
