package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// showReclaim shows Volcano's reclaim with the vgpu plugin choosing victims. Queue
// research (weight 3) borrows every idle card with an elastic sweep (one whole card
// per pod, minimum 1) beyond its share, since no other queue can use them. A new
// queue, late (weight 1, so research's share shrinks), then submits a gang of two
// whole-card pods:
// reclaim evicts sweep pods (never below the sweep's minimum, never a CPU-only pod)
// and the gang runs on their cards. (Queue inference would not do: its CPU-only
// preprocessing holds more than its weighted part of these nodes' 4 CPUs, so
// Volcano's proportion counts it overused and reclaim skips it.)
func showReclaim(ctx context.Context, c *cluster.Cluster, ns string, settle time.Duration) ([]string, error) {
	card := workload.Container{Name: "main", Cards: 1, Cores: 100}
	sweep := workload.Job(ns, "sweep", "research", 1, workload.Task{Name: "w", Replicas: 12, Containers: []workload.Container{card}})
	if _, err := c.Volcano.BatchV1alpha1().Jobs(ns).Create(ctx, sweep, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("submit the sweep: %w", err)
	}
	if err := waitSettled(ctx, c, ns, settle); err != nil {
		fmt.Println("  ", err)
	}
	before, err := running(ctx, c, ns, "sweep")
	if err != nil {
		return nil, err
	}
	lines := []string{fmt.Sprintf("research's elastic sweep borrowed %d idle cards (no other queue could use them)", len(before))}

	if err := openQueue(ctx, c, "late", 1); err != nil {
		return nil, err
	}
	late := workload.Job(ns, "late-gang", "late", 2, workload.Task{Name: "w", Replicas: 2,
		Containers: []workload.Container{card}})
	start := time.Now()
	if _, err := c.Volcano.BatchV1alpha1().Jobs(ns).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("submit the late gang: %w", err)
	}
	pods, err := workload.WaitPods(ctx, c.Client, ns, "late-gang", 90*time.Second, workload.AllPhase(2, corev1.PodRunning))
	if err != nil {
		return append(lines, fmt.Sprintf("queue late's gang did not run: %v (%s)", err, workload.Summary(pods))), nil
	}
	took := time.Since(start).Round(time.Second)
	after, err := running(ctx, c, ns, "sweep")
	if err != nil {
		return nil, err
	}
	evicted := 0
	for name, uid := range before {
		if after[name] != uid {
			evicted++
		}
	}
	return append(lines, fmt.Sprintf("queue late (weight 1, below its share) submitted a gang of two whole-card pods: reclaim evicted %d sweep pod(s) and the gang runs on their cards %s after it was submitted",
		evicted, took)), nil
}

// openQueue creates a reclaimable queue and waits until Volcano opens it.
func openQueue(ctx context.Context, c *cluster.Cluster, name string, weight int32) error {
	reclaimable := true
	q := &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedulingv1beta1.QueueSpec{Weight: weight, Reclaimable: &reclaimable}}
	if _, err := c.Volcano.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create queue %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		q, err := c.Volcano.SchedulingV1beta1().Queues().Get(ctx, name, metav1.GetOptions{})
		return err == nil && q.Status.State == schedulingv1beta1.QueueStateOpen, nil
	})
}

// running maps the job's running pods (not being deleted) to their UIDs.
func running(ctx context.Context, c *cluster.Cluster, ns, job string) (map[string]string, error) {
	pods, err := workload.Pods(ctx, c.Client, ns, job)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out[p.Name] = string(p.UID)
		}
	}
	return out, nil
}
