package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Per-pod card policies end to end, on gpu-d's four L40S: a pod with
// tessera.io/card-policy: idle-only takes a card nothing else holds and keeps it alone
// while six small shared pods spread over the other three; a second idle-only pod then finds no
// idle card and waits with a reason that says so; a pod whose tessera.io/score-weights
// does not parse waits with the reason quoting the annotation and its value.
func TestIdleOnlyCardsAndScoreWeightsOnOnePod(t *testing.T) {
	n := ns(t, "policies")
	defer cleanup(t, n)
	ctx := context.Background()
	waitAllCardsFree(t)
	// The shared pods spread over the cards, so that each card but the idle-only pod's ends
	// up held.
	l40s := map[string]string{api.AnnotationGPUTypeInclude: "L40S", api.AnnotationCardPolicy: string(api.PolicySpread)}
	idle := map[string]string{api.AnnotationGPUTypeInclude: "L40S", api.AnnotationCardPolicy: string(api.PolicyIdleOnly)}
	submit(t, workload.Job(n, "alone", "default", 1, workload.Task{Name: "t", Replicas: 1, Annotations: idle,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}}))
	alone, err := workload.WaitPods(ctx, cl.Client, n, "alone", 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	submit(t, workload.Job(n, "shared", "default", 6, workload.Task{Name: "t", Replicas: 6, Annotations: l40s,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}}))
	if _, err := workload.WaitPods(ctx, cl.Client, n, "shared", 2*time.Minute, workload.AllPhase(6, corev1.PodRunning)); err != nil {
		t.Fatal(err)
	}
	a, err := api.DecodeAssignment(alone[0].Annotations[api.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	card := a.Containers[0].Cards[0].UUID
	l := noOvercommit(t)
	busy := 0
	for _, u := range l {
		if u.Node != "gpu-d" || len(u.Holders) == 0 {
			continue
		}
		busy++
		if u.Card.UUID == card && len(u.Holders) != 1 {
			t.Errorf("the idle-only pod's card %s has holders %v", card, u.Holders)
		}
	}
	if busy != 4 {
		t.Errorf("gpu-d: %d of 4 cards in use, want the idle-only pod's and the shared pods' three", busy)
	}
	submit(t, workload.Job(n, "second", "default", 1, workload.Task{Name: "t", Replicas: 1, Annotations: idle,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}}))
	reason := pendingReason(t, n, "second", "every L40S is held")
	if !strings.Contains(reason, "idle") {
		t.Errorf("a second idle-only pod with no idle card waits with %q; want the reason to say the cards are not idle", reason)
	}
	t.Logf("idle-only: %s alone on %s beside 6 shared pods; a second idle-only pod waits: %s", alone[0].Name, card, reason)

	bad := map[string]string{api.AnnotationGPUTypeInclude: "A100", api.AnnotationScoreWeights: "pack=3"}
	submit(t, workload.Job(n, "weights", "default", 1, workload.Task{Name: "t", Replicas: 1, Annotations: bad,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}}))
	reason = pendingReason(t, n, "weights", "its score weights do not parse")
	if !strings.Contains(reason, api.AnnotationScoreWeights) || !strings.Contains(reason, `"pack=3"`) {
		t.Errorf("a pod with score weights %q waits with %q; want the annotation and its value named", "pack=3", reason)
	}
	t.Logf("malformed score weights: %s", reason)
}
