package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vcfake "volcano.sh/apis/pkg/client/clientset/versioned/fake"
)

func TestResetQueuesLeavesAFreshClustersQueuesOnly(t *testing.T) {
	vc := vcfake.NewSimpleClientset()
	for _, name := range []string{"default", "root", "queue1", "queue2"} {
		q := &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: schedulingv1beta1.QueueStatus{State: schedulingv1beta1.QueueStateOpen}}
		if _, err := vc.SchedulingV1beta1().Queues().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := ResetQueues(context.Background(), vc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 2 || gone[0] != "queue1" || gone[1] != "queue2" {
		t.Errorf("deleted %v, want queue1 and queue2", gone)
	}
	left, err := vc.SchedulingV1beta1().Queues().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range left.Items {
		names = append(names, q.Name)
	}
	if len(names) != 2 || !keptQueues[names[0]] || !keptQueues[names[1]] {
		t.Errorf("queues left %v, want default and root", names)
	}
	if again, err := ResetQueues(context.Background(), vc, 5*time.Second); err != nil || len(again) != 0 {
		t.Errorf("a second reset deleted %v (%v), want nothing", again, err)
	}
}
