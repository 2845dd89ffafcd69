package suite

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Reclaim by card share: queue early fills every one of the 24 cards with an elastic job
// (24 exclusive one-card pods, minimum 1) and runs a CPU-only job beside it; queue late,
// of the same weight, then submits a 12-card gang (minimum 12: Volcano's reclaim serves
// a job only while it is below its minimum). Volcano's reclaim, with the vgpu plugin
// choosing victims, takes 12 cards back from early: late ends with 12 pods running on
// cards, no card is over-committed, and neither late's pods nor early's CPU-only pods
// are evicted for it.
func TestReclaimGivesTheLateQueueItsShareOfCards(t *testing.T) {
	n := ns(t, "reclaim")
	defer cleanup(t, n)
	queue(t, "early", 1)
	queue(t, "late", 1)
	card := workload.Container{Name: "main", Cards: 1, MemPct: 50, Cores: 100}
	submit(t, workload.Job(n, "early", "early", 1, workload.Task{Name: "w", Replicas: 24, Containers: []workload.Container{card}}),
		workload.Job(n, "early-cpu", "early", 1, workload.Task{Name: "w", Replicas: 2, Containers: []workload.Container{{Name: "main", CPUOnly: true}}}))
	if _, err := workload.WaitPods(context.Background(), cl.Client, n, "early", 3*time.Minute, workload.AllPhase(24, corev1.PodRunning)); err != nil {
		t.Fatalf("queue early never filled the cards: %v", err)
	}
	cpu, err := workload.WaitPods(context.Background(), cl.Client, n, "early-cpu", time.Minute, workload.AllPhase(2, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	cpuUIDs := uids(cpu)

	start := time.Now()
	submit(t, workload.Job(n, "late", "late", 12, workload.Task{Name: "w", Replicas: 12, Containers: []workload.Container{card}}))
	late, err := workload.WaitPods(context.Background(), cl.Client, n, "late", 3*time.Minute, workload.AllPhase(12, corev1.PodRunning))
	if err != nil {
		pods, _ := workload.Pods(context.Background(), cl.Client, n, "early")
		t.Fatalf("queue late never reached its 12 cards: %v (early: %s)", err, workload.Summary(pods))
	}
	t.Logf("queue late ran 12 pods on reclaimed cards %s after it submitted", time.Since(start).Round(time.Second))
	lateUIDs := uids(late)
	time.Sleep(5 * time.Second)

	for job, want := range map[string]map[string]types.UID{"early-cpu": cpuUIDs, "late": lateUIDs} {
		pods, err := workload.Pods(context.Background(), cl.Client, n, job)
		if err != nil {
			t.Fatal(err)
		}
		if got := uids(pods); !maps.Equal(got, want) {
			t.Errorf("job %s lost pods to eviction: %v, before %v", job, got, want)
		}
	}
	early, err := workload.Pods(context.Background(), cl.Client, n, "early")
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range early {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	if running > 12 {
		t.Errorf("queue early still runs %d pods on cards; late took 12 of 24", running)
	}
	noOvercommit(t)
	checkHandoff(t, late)
}

func uids(pods []corev1.Pod) map[string]types.UID {
	out := map[string]types.UID{}
	for _, p := range pods {
		out[p.Name] = p.UID
	}
	return out
}
