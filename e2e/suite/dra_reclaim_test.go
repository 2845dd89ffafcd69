package suite

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Reclaim on DRA nodes, as Volcano v1.14.1 with Kubernetes 1.34.2's allocator does it:
// not at all (docs/dra.md, "What the scheduler counts"). Queue drr-a (weight 1) holds a
// whole card on each DRA node through claims (card-0: all the 1.34.2 allocator lets
// whole-card claims have on a node); queue drr-b (weight 63) asks for every
// device-plugin card and for eight whole cards through claims, so that drr-a is above
// its card share and drr-b below it: Tessera's plugin would offer one of drr-a's pods as
// the victim. But the allocator refuses the full DRA nodes as unresolvable, so
// Volcano's reclaim drops them before it asks for victims: for 30 s nothing of drr-a is
// evicted and none of drr-b's claims is allocated. This pins that; when a release
// reclaims for claims, it fails. Once drr-a's pods are gone (deleted, as their owner
// would), drr-b's pods get the cards in the next sessions.
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

	// Several sessions of reclaim: nothing of drr-a goes, none of drr-b's claims lands.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pods, err := workload.Pods(ctx, cl.Client, namespace, "a")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				t.Fatalf("drr-a's pod %s is %s (deleting: %v): Volcano now reclaims cards for claims; update docs/dra.md and this test",
					p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
			}
		}
		if got := uids(pods); !maps.Equal(got, held) {
			t.Fatalf("drr-a's pods changed (%v, before %v): Volcano now reclaims cards for claims; update docs/dra.md and this test", got, held)
		}
		bs, err := workload.Pods(ctx, cl.Client, namespace, "b-claims")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bs {
			if p.Spec.NodeName != "" {
				t.Fatalf("drr-b's %s was bound to %s while drr-a holds the DRA nodes' cards: Volcano now reclaims cards for claims; update docs/dra.md and this test",
					p.Name, p.Spec.NodeName)
			}
		}
		time.Sleep(time.Second)
	}
	bs, _ := workload.Pods(ctx, cl.Client, namespace, "b-claims")
	t.Logf("30 s later drr-a keeps both cards and drr-b's claims wait: %s (%s)", workload.Summary(bs), firstScheduledMessage(bs))

	// Once drr-a's pods are gone, their claims are released and drr-b's claims take the cards.
	start := time.Now()
	if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := workload.WaitPods(ctx, cl.Client, namespace, "b-claims", 2*time.Minute, func(ps []corev1.Pod) bool {
		running := 0
		for _, p := range ps {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= 2
	}); err != nil {
		bs, _ := workload.Pods(ctx, cl.Client, namespace, "b-claims")
		t.Fatalf("drr-b's claims did not take the freed cards: %v (%s)", err, workload.Summary(bs))
	}
	t.Logf("drr-b ran 2 pods on the freed cards %s after drr-a's job was deleted", time.Since(start).Round(time.Second))
	noOvercommit(t)
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

// schedulerQueueMiB reads, per queue, the card memory of one kind (deserved, allocated,
// request) from tessera_scheduler_queue_vgpu_memory_bytes.
func schedulerQueueMiB(ctx context.Context, kind string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.SchedulerMetricsURL(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", cl.SchedulerMetricsURL(), resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tessera_scheduler_queue_vgpu_memory_bytes{") || !strings.Contains(line, `kind="`+kind+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `queue="`)
		q, _, _ := strings.Cut(rest, `"`)
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[q] = v / (1 << 20)
		}
	}
	return out, sc.Err()
}
