package suite

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// The handoff: 100 single-pod jobs submitted at once, sized so that they need all four
// nodes (24 cards); every container's recorded environment, limits file and kubelet slots equal its
// pod's assignment, and no card holds more than it has.
func TestHandoffHundredPodsAcrossFourNodes(t *testing.T) {
	n := ns(t, "handoff")
	defer cleanup(t, n)
	var jobs []*batchv1alpha1.Job
	for i := 0; i < 100; i++ {
		// A fifth of a card each (a tenth of the pods take a fifth of two cards): 110
		// fifths, more than any three nodes hold (100), less than all four (120).
		c := workload.Container{Name: "main", Cards: 1, MemPct: 20, Cores: 20}
		if i%10 == 0 {
			c.Cards = 2
		}
		jobs = append(jobs, workload.Job(n, fmt.Sprintf("j%03d", i), "default", 1, workload.Task{Name: "t", Replicas: 1, Containers: []workload.Container{c}}))
	}
	start := time.Now()
	submit(t, jobs...)
	var running []corev1.Pod
	deadline := time.Now().Add(4 * time.Minute)
	for _, j := range jobs {
		pods, err := workload.WaitPods(context.Background(), cl.Client, n, j.Name, time.Until(deadline), workload.AllPhase(1, corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, pods...)
	}
	t.Logf("100 pods running %s after submission", time.Since(start).Round(time.Second))
	perNode := map[string]int{}
	for _, p := range running {
		perNode[p.Spec.NodeName]++
	}
	t.Logf("pods per node: %v", perNode)
	if len(perNode) != 4 {
		t.Errorf("pods on %d nodes, want 4: %v", len(perNode), perNode)
	}
	checkHandoff(t, running)
	noOvercommit(t)
}
