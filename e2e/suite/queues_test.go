package suite

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

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

// Under contention for compute, queues of weight 3 and 1 each submit 100 tasks of one
// card at 10% memory and 25 cores. The 24 cards hold 96 such tasks (2,400 cores),
// while slots (240), card memory and CPU stay plentiful, so Volcano's proportion
// plugin alone sees both queues satisfied. The jobs are submitted while the scheduler
// is down, so it meets both at once with none of their pods created (Volcano's job
// controller creates them only once the scheduler has enqueued a job): the plugin must
// count the members from the jobs' templates, and the first wave must split 1,800:600
// cores (72 and 24 tasks) although the pods appear over several sessions, every card
// within its capacity; every task must then run to completion.
func TestQueuesShareCoresByWeightUnderContention(t *testing.T) {
	n := ns(t, "contention")
	defer cleanup(t, n)
	queue(t, "heavy", 3)
	queue(t, "light", 1)
	cl.KillScheduler()
	started := false
	defer func() {
		if !started {
			if err := cl.StartScheduler(context.Background()); err != nil {
				t.Errorf("restarting the scheduler: %v", err)
			}
		}
	}()
	task := workload.Task{Name: "t", Replicas: 100, Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 25, SleepSeconds: 20}}}
	submit(t, workload.Job(n, "heavy", "heavy", 1, task), workload.Job(n, "light", "light", 1, task))
	listPods := func() ([]corev1.Pod, error) {
		l, err := cl.Client.CoreV1().Pods(n).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pgs, err := cl.Volcano.SchedulingV1beta1().PodGroups(n).List(ctx, metav1.ListOptions{})
		return err == nil && len(pgs.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("the jobs' PodGroups were not created: %v", err)
	}
	if pods, err := listPods(); err != nil || len(pods) != 0 {
		t.Fatalf("%d pods created before the scheduler enqueued their jobs (%v): the test would not see the template demand", len(pods), err)
	}
	started = true
	if err := cl.StartScheduler(context.Background()); err != nil {
		t.Fatal(err)
	}

	perQueue := func(pods []corev1.Pod) map[string]int {
		out := map[string]int{}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				out[p.Annotations["volcano.sh/queue-name"]]++
			}
		}
		return out
	}
	var wave map[string]int
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pods, err := listPods()
		if err != nil {
			return false, nil
		}
		wave = perQueue(pods)
		return wave["heavy"]+wave["light"] >= 96, nil
	})
	t.Logf("first wave, tasks per queue: %v", wave)
	if err != nil {
		t.Fatalf("the first wave never filled the cards' 2,400 cores: %v", err)
	}
	if wave["heavy"] != 72 || wave["light"] != 24 {
		t.Errorf("first wave: heavy (weight 3) got %d tasks, light (weight 1) %d; want 72 and 24 (1,800 and 600 of 2,400 cores)", wave["heavy"], wave["light"])
	}
	noOvercommit(t)
	for _, job := range []string{"heavy", "light"} {
		if _, err := workload.WaitPods(context.Background(), cl.Client, n, job, 4*time.Minute, workload.AllPhase(100, corev1.PodSucceeded)); err != nil {
			t.Errorf("job %s: %v", job, err)
			explainFailedPods(t, n)
		}
	}
}
