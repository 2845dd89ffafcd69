package suite

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Preemption by priority inside one queue: a low-priority elastic job fills every one
// of the 24 cards (one exclusive card per pod, minimum 1) beside a low-priority
// CPU-only job; a high-priority 4-card gang of the same queue then arrives. Volcano's
// preempt, with the vgpu plugin choosing victims, evicts exactly four of the
// low-priority card pods: the gang runs on their cards, the CPU-only pods stay, and
// no card is over-committed.
func TestHighPriorityGangPreemptsInsideItsQueue(t *testing.T) {
	n := ns(t, "preempt")
	defer cleanup(t, n)
	priorityClass(t, "tessera-e2e-low", 10)
	priorityClass(t, "tessera-e2e-high", 1000)
	queue(t, "solo", 1)
	card := workload.Container{Name: "main", Cards: 1, MemPct: 50, Cores: 100}
	low := workload.Job(n, "low", "solo", 1, workload.Task{Name: "w", Replicas: 24, Containers: []workload.Container{card}})
	low.Spec.PriorityClassName = "tessera-e2e-low"
	lowCPU := workload.Job(n, "low-cpu", "solo", 1, workload.Task{Name: "w", Replicas: 2, Containers: []workload.Container{{Name: "main", CPUOnly: true}}})
	lowCPU.Spec.PriorityClassName = "tessera-e2e-low"
	submit(t, low, lowCPU)
	if _, err := workload.WaitPods(context.Background(), cl.Client, n, "low", 3*time.Minute, workload.AllPhase(24, corev1.PodRunning)); err != nil {
		t.Fatalf("the low-priority job never filled the cards: %v", err)
	}
	cpu, err := workload.WaitPods(context.Background(), cl.Client, n, "low-cpu", time.Minute, workload.AllPhase(2, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	high := workload.Job(n, "high", "solo", 4, workload.Task{Name: "w", Replicas: 4, Containers: []workload.Container{card}})
	high.Spec.PriorityClassName = "tessera-e2e-high"
	submit(t, high)
	pods, err := workload.WaitPods(context.Background(), cl.Client, n, "high", 3*time.Minute, workload.AllPhase(4, corev1.PodRunning))
	if err != nil {
		rest, _ := workload.Pods(context.Background(), cl.Client, n, "low")
		t.Fatalf("the high-priority gang never ran: %v (low: %s)", err, workload.Summary(rest))
	}
	t.Logf("the high-priority gang ran on preempted cards %s after it was submitted", time.Since(start).Round(time.Second))
	time.Sleep(5 * time.Second)

	if got, err := workload.Pods(context.Background(), cl.Client, n, "low-cpu"); err != nil {
		t.Fatal(err)
	} else if a, b := uids(got), uids(cpu); !maps.Equal(a, b) {
		t.Errorf("CPU-only pods were evicted for a card shortage: %v, before %v", a, b)
	}
	rest, err := workload.Pods(context.Background(), cl.Client, n, "low")
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range rest {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running++
		}
	}
	// Volcano's job controller recreates evicted pods; they wait for free cards.
	if running != 20 {
		t.Errorf("%d low-priority pods run on cards, want 20 (4 preempted for the 4-card gang): %s", running, workload.Summary(rest))
	}
	noOvercommit(t)
	checkHandoff(t, pods)
}

func priorityClass(t *testing.T, name string, value int32) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	_, err := cl.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
