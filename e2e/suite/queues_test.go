package suite

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Multi-tenant queues: two queues with weights 3 and 1 submit jobs asking for memory in
// MiB, memory in percent and cores; every task lands, each pod carries its queue, and no
// card holds more than it has.
func TestQueuesShareCardsWithoutOvercommit(t *testing.T) {
	n := ns(t, "tenants")
	defer cleanup(t, n)
	queue(t, "team-research", 3)
	queue(t, "team-serving", 1)
	jobs := []struct {
		name, queue string
		min         int32
		task        workload.Task
	}{
		{"train", "team-research", 4, workload.Task{Name: "worker", Replicas: 4, Containers: []workload.Container{{Name: "trainer", Cards: 2, MemMiB: 10240, Cores: 30}}}},
		{"finetune", "team-research", 2, workload.Task{Name: "worker", Replicas: 2, Containers: []workload.Container{{Name: "trainer", Cards: 1, MemPct: 50, Cores: 50}}}},
		{"serve", "team-serving", 1, workload.Task{Name: "replica", Replicas: 8, Containers: []workload.Container{{Name: "server", Cards: 1, MemPct: 25, Cores: 20}}}},
		{"embed", "team-serving", 1, workload.Task{Name: "replica", Replicas: 6, Containers: []workload.Container{
			{Name: "model", Cards: 1, MemMiB: 6000, Cores: 15}, {Name: "sidecar", CPUOnly: true}}}},
	}
	for _, j := range jobs {
		submit(t, workload.Job(n, j.name, j.queue, j.min, j.task))
	}
	var all []corev1.Pod
	for _, j := range jobs {
		pods, err := workload.WaitPods(context.Background(), cl.Client, n, j.name, 3*time.Minute, workload.AllPhase(int(j.task.Replicas), corev1.PodRunning))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if q := p.Annotations["volcano.sh/queue-name"]; q != j.queue {
				t.Errorf("pod %s: queue %q, want %q", p.Name, q, j.queue)
			}
		}
		all = append(all, pods...)
	}
	checkHandoff(t, all)
	l := noOvercommit(t)
	perQueue := map[string]int{}
	for _, u := range l {
		for _, h := range u.Holders {
			if h.Namespace == n {
				perQueue[h.Queue] += h.Cores
			}
		}
	}
	t.Logf("cores assigned per queue: %v", perQueue)
}
