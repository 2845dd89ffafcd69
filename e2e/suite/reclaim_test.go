package suite

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
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
	cpuUIDs := uids(fillEveryCard(t, n, "early", card))

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

// A gang of members that share cards reclaims only the cards it needs: queue early
// holds all 24 cards whole, queue late submits 8 members of half a card each (minimum
// 8). The first member of each pair reclaims a card; the second is pipelined onto the
// rest of it with no eviction of its own (the shipped conf keeps proportion from
// offering reclaim victims, so Volcano's reclaim pipelines it without evicting). Late
// runs all 8 on 4 reclaimed cards, early loses 4 pods, its CPU-only pods none.
func TestReclaimServesAGangThatSharesReclaimedCards(t *testing.T) {
	n := ns(t, "reclaim-share")
	defer cleanup(t, n)
	queue(t, "share-early", 1)
	queue(t, "share-late", 1)
	whole := workload.Container{Name: "main", Cards: 1, MemPct: 50, Cores: 100}
	half := workload.Container{Name: "main", Cards: 1, MemPct: 25, Cores: 50}
	cpu := fillEveryCard(t, n, "share-early", whole)

	start := time.Now()
	submit(t, workload.Job(n, "late", "share-late", 8, workload.Task{Name: "w", Replicas: 8, Containers: []workload.Container{half}}))
	late, err := workload.WaitPods(context.Background(), cl.Client, n, "late", 3*time.Minute, workload.AllPhase(8, corev1.PodRunning))
	if err != nil {
		pods, _ := workload.Pods(context.Background(), cl.Client, n, "early")
		t.Fatalf("queue late's half-card gang never ran: %v (early: %s)", err, workload.Summary(pods))
	}
	t.Logf("queue late ran 8 half-card pods on reclaimed cards %s after it submitted", time.Since(start).Round(time.Second))
	time.Sleep(5 * time.Second)

	pods, err := workload.Pods(context.Background(), cl.Client, n, "early-cpu")
	if err != nil {
		t.Fatal(err)
	}
	if got := uids(pods); !maps.Equal(got, uids(cpu)) {
		t.Errorf("early's CPU-only pods were evicted: %v, before %v", got, uids(cpu))
	}
	early, err := workload.Pods(context.Background(), cl.Client, n, "early")
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range early {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running++
		}
	}
	// 4 cards hold late's 8 halves: exactly 4 of early's pods give way, none more.
	if running != 20 {
		t.Errorf("queue early runs %d pods on cards, want 20: late's 8 half-card pods need 4 cards", running)
	}
	cards := map[string]int{}
	for _, p := range late {
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		for _, c := range a.Containers {
			for _, card := range c.Cards {
				cards[card.UUID]++
			}
		}
	}
	if len(cards) != 4 {
		t.Errorf("late's 8 half-card pods are on %d cards, want 4 (two per reclaimed card): %v", len(cards), cards)
	}
	noOvercommit(t)
	checkHandoff(t, late)
}

// fillEveryCard has queue run job "early" (24 one-card pods of card, minimum 1: every card
// of the cluster) and job "early-cpu" (2 CPU-only pods) in namespace n, and returns the
// CPU-only pods once all are running.
func fillEveryCard(t *testing.T, n, queue string, card workload.Container) []corev1.Pod {
	t.Helper()
	submit(t, workload.Job(n, "early", queue, 1, workload.Task{Name: "w", Replicas: 24, Containers: []workload.Container{card}}),
		workload.Job(n, "early-cpu", queue, 1, workload.Task{Name: "w", Replicas: 2, Containers: []workload.Container{{Name: "main", CPUOnly: true}}}))
	if _, err := workload.WaitPods(context.Background(), cl.Client, n, "early", 3*time.Minute, workload.AllPhase(24, corev1.PodRunning)); err != nil {
		t.Fatalf("queue %s never filled the cards: %v", queue, err)
	}
	cpu, err := workload.WaitPods(context.Background(), cl.Client, n, "early-cpu", time.Minute, workload.AllPhase(2, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	return cpu
}

func uids(pods []corev1.Pod) map[string]types.UID {
	out := map[string]types.UID{}
	for _, p := range pods {
		out[p.Name] = p.UID
	}
	return out
}
