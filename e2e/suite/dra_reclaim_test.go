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

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Reclaim on DRA nodes. Volcano v1.14.1's reclaim never takes cards back for claims
// (Kubernetes 1.34.2's allocator refuses a full DRA node as unresolvable before any
// plugin is asked); Tessera's plugin does it itself (plugins/vgpu/drareclaim.go).
// Queue drr-a (weight 1) holds a whole card on each DRA node through claims (card-0:
// all the 1.34.2 allocator lets whole-card claims have on a node); queue drr-b (weight
// 63) asks for every device-plugin card and for eight whole cards through claims, so
// that drr-a is above its card share and drr-b below it. The plugin evicts one of
// drr-a's pods (its job's minimum is one), and once that pod and its claim are gone a
// claim of drr-b's runs on the freed card; drr-a keeps its other card.
func TestDRAReclaimOnADRANode(t *testing.T) {
	ctx := context.Background()
	defer startDRA(t)()
	namespace := ns(t, "dra-reclaim")
	defer cleanup(t, namespace)
	queue(t, "drr-a", 1)
	queue(t, "drr-b", 63)
	claimTemplate(t, namespace, "whole", "", "")

	a := draJob(namespace, "a", "whole", "", 2)
	a.Spec.Queue, a.Spec.MinAvailable = "drr-a", 1
	a.Spec.Tasks[0].Template.Spec.NodeSelector = nil
	submit(t, a)
	held := uids(waitDRAPods(t, namespace, "a", 2))

	cards := workload.Job(namespace, "b-cards", "drr-b", 1, workload.Task{Name: "t", Replicas: 30,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 100, Cores: 100}}})
	claims := draJob(namespace, "b-claims", "whole", "", 8)
	claims.Spec.Queue, claims.Spec.MinAvailable = "drr-b", 1
	claims.Spec.Tasks[0].Template.Spec.NodeSelector = nil
	submit(t, cards, claims)
	if _, err := workload.WaitPods(ctx, cl.Client, namespace, "b-cards", 3*time.Minute, func(ps []corev1.Pod) bool {
		running := 0
		for _, p := range ps {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= 24
	}); err != nil {
		t.Fatalf("drr-b never ran on the device-plugin cards: %v", err)
	}

	// The premise: the plugin's ledger has drr-a above its card share, drr-b below it.
	var deserved, allocated map[string]float64
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if deserved, err = schedulerQueueMiB(ctx, "deserved"); err != nil {
			return false, nil
		}
		if allocated, err = schedulerQueueMiB(ctx, "allocated"); err != nil {
			return false, nil
		}
		return allocated["drr-a"] > deserved["drr-a"] && allocated["drr-b"] < deserved["drr-b"], nil
	}); err != nil {
		t.Fatalf("the scheduler never had drr-a above its card share and drr-b below it (MiB deserved %v, allocated %v)", deserved, allocated)
	}
	t.Logf("card memory (MiB): drr-a holds %.0f of %.0f deserved, drr-b %.0f of %.0f", allocated["drr-a"], deserved["drr-a"],
		allocated["drr-b"], deserved["drr-b"])

	// Tessera's claim reclaimer: one of drr-a's pods is evicted (its job keeps its
	// minimum of one), and one of drr-b's claims runs on the freed card, without anyone
	// deleting drr-a's job.
	start := time.Now()
	var bs []corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := workload.Pods(ctx, cl.Client, namespace, "a")
		if err != nil {
			return false, nil
		}
		if kept := keptRunning(pods, held); kept == 0 {
			return false, fmt.Errorf("both of drr-a's pods were evicted (now %s): its job's minimum of one was not kept", workload.Summary(pods))
		}
		if bs, err = workload.Pods(ctx, cl.Client, namespace, "b-claims"); err != nil {
			return false, nil
		}
		return running(bs) >= 1 && keptRunning(pods, held) == 1, nil
	}); err != nil {
		t.Fatalf("the claim reclaimer did not give drr-b a card of drr-a's: %v (drr-b's claims: %s, %s)", err, workload.Summary(bs), firstScheduledMessage(bs))
	}
	t.Logf("drr-b runs a claim on a card reclaimed from drr-a (seen %s after the shares were read)", time.Since(start).Round(time.Second))

	// The eviction is on drr-a's PodGroup, with the reason.
	evs, err := cl.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=Evict,involvedObject.kind=PodGroup"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, "a-") && strings.Contains(e.Message, "Tessera reclaims") {
			found = true
		}
	}
	if !found {
		t.Errorf("no Evict event from Tessera's claim reclaimer on drr-a's PodGroup (%d Evict events)", len(evs.Items))
	}

	// Then nothing more: drr-a keeps its last card (its minimum), drr-b keeps the one it got.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		pods, err := workload.Pods(ctx, cl.Client, namespace, "a")
		if err != nil {
			t.Fatal(err)
		}
		if keptRunning(pods, held) != 1 {
			t.Fatalf("drr-a keeps %d of its first pods running (%s), want 1: its minimum", keptRunning(pods, held), workload.Summary(pods))
		}
		time.Sleep(time.Second)
	}
	bs, _ = workload.Pods(ctx, cl.Client, namespace, "b-claims")
	if running(bs) < 1 {
		t.Fatalf("drr-b's claim no longer runs: %s", workload.Summary(bs))
	}
	t.Logf("20 s later drr-a keeps one card, drr-b's claims: %s", workload.Summary(bs))
	noOvercommit(t)
}

// keptRunning counts the pods of held (name -> UID) still running, not being deleted.
func keptRunning(pods []corev1.Pod, held map[string]types.UID) int {
	n := 0
	for _, p := range pods {
		if held[p.Name] == p.UID && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

func running(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// firstScheduledMessage is the PodScheduled message of the first pod that has one.
func firstScheduledMessage(ps []corev1.Pod) string {
	for _, p := range ps {
		if m := scheduledMessage(p); m != "" {
			return m
		}
	}
	return "no scheduling message"
}
