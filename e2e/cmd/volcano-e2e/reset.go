package main

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"
)

// keptQueues are the queues a fresh Volcano has: the default queue and the root of the
// hierarchy.
var keptQueues = map[string]bool{"default": true, "root": true}

// ResetQueues deletes every queue but default and root, as Volcano's own DeleteQueue does
// (closed first, then deleted), and waits until they are gone. Some of Volcano's specs
// create queues their cleanup never deletes (the guarantee specs' queue1 and queue2, one
// with 2 CPU guaranteed): in Volcano's CI each suite starts on a cluster that never ran
// the other, here every suite and conf shares one, so each suite starts from a fresh
// cluster's queues instead.
func ResetQueues(ctx context.Context, vc vcclient.Interface, timeout time.Duration) ([]string, error) {
	qs, err := vc.SchedulingV1beta1().Queues().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	var gone []string
	for i := range qs.Items {
		q := &qs.Items[i]
		if keptQueues[q.Name] {
			continue
		}
		if q.Status.State != schedulingv1beta1.QueueStateClosed {
			q.Status.State = schedulingv1beta1.QueueStateClosed
			if _, err := vc.SchedulingV1beta1().Queues().UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("close queue %s: %w", q.Name, err)
			}
		}
		if err := vc.SchedulingV1beta1().Queues().Delete(ctx, q.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete queue %s: %w", q.Name, err)
		}
		gone = append(gone, q.Name)
	}
	deadline := time.Now().Add(timeout)
	for _, name := range gone {
		for {
			_, err := vc.SchedulingV1beta1().Queues().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				return gone, fmt.Errorf("queue %s still there %s after its deletion (%v)", name, timeout, err)
			}
			select {
			case <-ctx.Done():
				return gone, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return gone, nil
}
