package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

func burst(n, prefix string, count int, ann map[string]string) []*batchv1alpha1.Job {
	var jobs []*batchv1alpha1.Job
	for i := 0; i < count; i++ {
		jobs = append(jobs, workload.Job(n, fmt.Sprintf("%s%02d", prefix, i), "default", 1, workload.Task{Name: "t", Replicas: 1, Annotations: ann,
			Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}}))
	}
	return jobs
}

func waitAllRunning(t *testing.T, n string, jobs []*batchv1alpha1.Job, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var all []corev1.Pod
	deadline := time.Now().Add(timeout)
	for _, j := range jobs {
		pods, err := workload.WaitPods(context.Background(), cl.Client, n, j.Name, time.Until(deadline), workload.AllPhase(1, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pods...)
	}
	return all
}

// runningCount counts Running pods in the namespace.
func runningCount(n string) int {
	pods, err := cl.Client.CoreV1().Pods(n).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0
	}
	c := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			c++
		}
	}
	return c
}

// The device plugins of two nodes are killed in the middle of a burst and restarted:
// every pod runs with exactly its cards, or was refused by its kubelet with a reason
// (a real kubelet fails the admission of pods needing a plugin that is away).
func TestFaultDevicePluginRestartMidBurst(t *testing.T) {
	n := ns(t, "fault-dp")
	defer cleanup(t, n)
	jobs := burst(n, "b", 40, nil)
	submit(t, jobs...)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return runningCount(n) >= 5, nil
	}); err != nil {
		t.Fatal("no pod started")
	}
	cl.KillAgent("gpu-a")
	cl.KillAgent("gpu-b")
	t.Logf("agents of gpu-a, gpu-b killed with %d pods running", runningCount(n))
	for _, node := range []string{"gpu-a", "gpu-b"} {
		if err := cl.StartAgent(context.Background(), node); err != nil {
			t.Fatal(err)
		}
	}
	checkBurstOutcome(t, n, jobs)
	noOvercommit(t)
}

// The scheduler is killed right after a burst is submitted and started again: every pod
// runs once, no card is double-assigned.
func TestFaultSchedulerRestart(t *testing.T) {
	n := ns(t, "fault-sched")
	defer cleanup(t, n)
	jobs := burst(n, "s", 30, nil)
	submit(t, jobs...)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return runningCount(n) >= 3, nil
	}); err != nil {
		t.Fatal("no pod started")
	}
	cl.KillScheduler()
	t.Logf("scheduler killed with %d pods running", runningCount(n))
	if err := cl.StartScheduler(context.Background()); err != nil {
		t.Fatal(err)
	}
	pods := waitAllRunning(t, n, jobs, 3*time.Minute)
	checkHandoff(t, pods)
	noOvercommit(t)
}

// A node's agent is gone: once its heartbeat is stale the scheduler places nothing there
// (pods that can only go there stay pending), and when the agent is back they run.
func TestFaultStaleAgent(t *testing.T) {
	n := ns(t, "fault-stale")
	defer cleanup(t, n)
	cl.KillAgent("gpu-d")
	stale, _ := time.ParseDuration(heartbeatTimeout)
	// The heartbeat annotation is the agent's only sign of life: wait until it is older
	// than the scheduler's timeout.
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*stale+30*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := cl.Client.CoreV1().Nodes().Get(ctx, "gpu-d", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		hb, err := time.Parse(time.RFC3339, node.Annotations[api.AnnotationHeartbeat])
		return err == nil && time.Since(hb) > stale+2*time.Second, nil
	}); err != nil {
		t.Fatal("heartbeat of gpu-d never went stale")
	}
	jobs := burst(n, "l", 4, map[string]string{api.AnnotationGPUTypeInclude: "L40S"})
	submit(t, jobs...)
	// Give the scheduler several sessions; nothing may bind to the stale node.
	reason := pendingReason(t, n, "", "its agent is gone")
	t.Logf("pending reason while gpu-d is stale: %s", reason)
	// The pods may go only to gpu-d (L40S): the reason must name it and its heartbeat.
	if !strings.Contains(reason, "node gpu-d: node agent heartbeat is") {
		t.Errorf("pending reason does not name gpu-d's stale heartbeat: %s", reason)
	}
	if err := cl.StartAgent(context.Background(), "gpu-d"); err != nil {
		t.Fatal(err)
	}
	pods := waitAllRunning(t, n, jobs, 2*time.Minute)
	checkHandoff(t, pods)
	noOvercommit(t)
}
