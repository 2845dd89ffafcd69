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

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// MIG instances split by queue weight (docs/queues.md, "MIG instances: a dimension of
// their own"), on gpu-e: two H100s in MIG mode holding three 3g.40gb instances and
// four 1g.10gb this scenario does not ask for. The queues' MIG supply is the slices the
// instances hold, 13; queues mq-heavy (weight 3) and mq-light (weight 1) each ask for
// four 3g.40gb instances (12 slices), so they deserve 9.75 and 3.25.
//
// mq-light submits one job of four pods (minAvailable 1) first and, alone, takes all
// three instances. mq-heavy then submits four jobs of one pod: reclaim takes
// mq-light's instances back while it holds more than its 3.25 slices, leaving it
// floor(3.25 / 3) = 1 instance, and mq-heavy runs on the other 2 (6 of its 9.75
// slices). That is the rule for N instances of s slices: the lighter queue keeps
// floor(share / s), the heavier gets the rest; with 3 instances 3:1 comes out 2:1.
// Once settled, the split holds for a while, every waiting pod waits for an instance
// (both queues are below their shares, so the scheduler's share admits them and the
// predicate names the missing instance), and the scheduler's
// tessera_scheduler_queue_mig_slices{kind="allocated"} equals each queue's held slices
// as its pods' assignments and gpu-e's layout say, deserved 9.75 and 3.25.
func TestMIGQueuesSplitInstancesByWeight(t *testing.T) {
	ctx := context.Background()
	for _, q := range []string{"mq-heavy", "mq-light"} {
		defer func() {
			if err := cl.Volcano.SchedulingV1beta1().Queues().Delete(context.Background(), q, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete queue %s: %v", q, err)
			}
		}()
	}
	queue(t, "mq-heavy", 3)
	queue(t, "mq-light", 1)
	n := ns(t, "mig-queues")
	defer cleanup(t, n)

	one := []workload.Container{{Name: "main", Cards: 1}}
	task := workload.Task{Name: "t", Replicas: 4, Containers: one, Annotations: map[string]string{api.AnnotationMIGProfile: "3g.40gb"}}
	submit(t, workload.Job(n, "light", "mq-light", 1, task))
	if _, err := workload.WaitPods(ctx, cl.Client, n, "light", 2*time.Minute, atLeastRunning(3)); err != nil {
		t.Fatalf("queue mq-light alone never held gpu-e's three 3g.40gb instances: %v", err)
	}
	// Volcano's reclaim acts only for a starving job (fewer running than its
	// minAvailable): mq-heavy's four pods are four jobs of one, each starving until it
	// runs.
	one1 := task
	one1.Replicas = 1
	for i := 0; i < 4; i++ {
		submit(t, workload.Job(n, fmt.Sprintf("heavy-%d", i), "mq-heavy", 1, one1))
	}

	want := map[string]int{"mq-heavy": 2, "mq-light": 1}
	got := map[string]int{}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		byQueue, err := queuePods(ctx, n)
		if err != nil {
			return false, nil
		}
		for q := range want {
			got[q] = countRunning(byQueue[q])
		}
		return got["mq-heavy"] == want["mq-heavy"] && got["mq-light"] == want["mq-light"], nil
	})
	if err != nil {
		t.Fatalf("running instances per queue %v, want %v: %v; waiting: %s", got, want, err, podGroupReasons(t, n))
	}
	time.Sleep(10 * time.Second) // settled: nothing more is reclaimed either way
	byQueue, err := queuePods(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]float64{}
	waitingForInstance := 0
	for q, pods := range byQueue {
		if r := countRunning(pods); r != want[q] {
			t.Errorf("queue %s runs %d instances 10 s after settling, want %d still", q, r, want[q])
		}
		held[q] = heldSlices(t, pods)
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				continue
			}
			switch m := scheduledMessage(p); {
			case strings.Contains(m, "MIG slices"):
				t.Errorf("waiting pod %s of queue %s says %q; its queue is below its MIG share, so only the instances should hold it", p.Name, q, m)
			case strings.Contains(m, "no free MIG instance of profile 3g.40gb"):
				waitingForInstance++
			}
		}
	}
	if waitingForInstance == 0 {
		t.Errorf("no waiting pod says it waits for a free 3g.40gb instance; waiting: %s", podGroupReasons(t, n))
	}
	if held["mq-heavy"] != 6 || held["mq-light"] != 3 {
		t.Errorf("held MIG slices %v, want mq-heavy 6 and mq-light 3", held)
	}
	var allocated, deserved map[string]float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if allocated, err = schedulerQueueMIGSlices(ctx, "allocated"); err != nil {
			return false, nil
		}
		if deserved, err = schedulerQueueMIGSlices(ctx, "deserved"); err != nil {
			return false, nil
		}
		return allocated["mq-heavy"] == held["mq-heavy"] && allocated["mq-light"] == held["mq-light"], nil
	})
	if err != nil {
		t.Errorf("tessera_scheduler_queue_mig_slices{kind=\"allocated\"} %v, want what the pods hold: %v", allocated, held)
	}
	if deserved["mq-heavy"] != 9.75 || deserved["mq-light"] != 3.25 {
		t.Errorf("tessera_scheduler_queue_mig_slices{kind=\"deserved\"} %v, want mq-heavy 9.75 and mq-light 3.25 (13 slices at 3:1)", deserved)
	}
	t.Logf("held %v, deserved %v; waiting: %s", held, deserved, podGroupReasons(t, n))
}

// queuePods lists the namespace's pods by their queue.
func queuePods(ctx context.Context, n string) (map[string][]corev1.Pod, error) {
	pods, err := cl.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		q := p.Annotations["volcano.sh/queue-name"]
		out[q] = append(out[q], p)
	}
	return out, nil
}

// atLeastRunning is a WaitPods condition: at least n pods running.
func atLeastRunning(n int) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool { return countRunning(pods) >= n }
}

func countRunning(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// heldSlices sums the MIG compute slices of the instances the running pods' assignments
// name, by their profile in their node's layout.
func heldSlices(t *testing.T, pods []corev1.Pod) float64 {
	t.Helper()
	sum := 0.0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		node, err := cl.Client.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		layout, err := api.DecodeMIGInstances(node.Annotations[api.AnnotationMIGInstances])
		if err != nil {
			t.Fatalf("%s's %s: %v", node.Name, api.AnnotationMIGInstances, err)
		}
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for _, c := range a.Containers {
			for _, card := range c.Cards {
				for _, in := range layout.Cards[card.UUID] {
					if card.IsMIG() && in.UUID == card.MIG {
						n, err := fairshare.MIGSlices(in.Profile)
						if err != nil {
							t.Fatal(err)
						}
						sum += n
					}
				}
			}
		}
	}
	return sum
}
