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
)

// Card 1 of gpu-c reports XID 79 (fallen off the bus) through NVML while two pods run on
// it. Within seconds its slots leave the node's allocatable and the inventory marks it
// unhealthy; the running pods keep running with their handoffs intact (the kubelet does
// not stop them); a pod pinned to the card stays unbound with a reason that names it.
// Once the card has been quiet for the agent's recovery time it is healthy again and
// the pinned pod runs, with no card over-committed.
func TestFaultXIDWhilePodsRun(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "fault-xid")
	defer cleanup(t, n)
	const node, card = "gpu-c", "GPU-gpu-c-1"
	pin := map[string]string{api.AnnotationGPUUUIDInclude: card}
	first := burst(n, "x", 2, pin)
	submit(t, first...)
	waitAllRunning(t, n, first, 2*time.Minute)
	before, _ := cardHealth(ctx, node, card)
	if err := cl.InjectXID(node, 1, 79); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var after int64
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		slots, healthy := cardHealth(ctx, node, card)
		after = slots
		return !healthy && slots < before, nil
	}); err != nil {
		t.Fatalf("card %s never unhealthy in the inventory with fewer slots (allocatable %d)", card, after)
	}
	t.Logf("XID 79 on %s: unhealthy in the inventory, allocatable slots %d -> %d, after %s", card, before,
		after, time.Since(start).Round(100*time.Millisecond))

	late := burst(n, "y", 1, pin)
	submit(t, late...)
	reason := pendingReason(t, n, "y", "its card is unhealthy")
	t.Logf("pod pinned to the unhealthy card: %s", reason)
	// Volcano puts one node's reason on the pod; its PodGroup carries every node's.
	if pg := podGroupReasons(t, n); !strings.Contains(reason+pg, "unhealthy") {
		t.Errorf("neither the pod nor its PodGroup says the card is unhealthy: pod %q, PodGroup %q", reason, pg)
	} else {
		t.Logf("PodGroup: %s", pg)
	}
	checkHandoff(t, waitAllRunning(t, n, first, 10*time.Second))

	pods := waitAllRunning(t, n, late, 2*time.Minute)
	t.Logf("card healthy again: the pinned pod ran %s after the XID", time.Since(start).Round(time.Second))
	checkHandoff(t, pods)
	noOvercommit(t)
}

// cardHealth returns the node's allocatable slots and whether its inventory shows the
// card healthy.
func cardHealth(ctx context.Context, node, uuid string) (int64, bool) {
	nd, err := cl.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, false
	}
	q := nd.Status.Allocatable[corev1.ResourceName(api.ResourceNumber)]
	inv, err := api.DecodeInventory(nd.Annotations[api.AnnotationInventory])
	if err != nil {
		return q.Value(), false
	}
	for _, c := range inv.Cards {
		if c.UUID == uuid {
			return q.Value(), c.Healthy
		}
	}
	return q.Value(), false
}

// pendingReason waits until an unbound pod of the namespace whose name starts with
// prefix carries a PodScheduled=False message and returns it; such a pod bound meanwhile
// fails the test ("bound to <node> while <while>").
func pendingReason(t *testing.T, namespace, prefix, while string) string {
	t.Helper()
	var reason string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if !strings.HasPrefix(p.Name, prefix) {
				continue
			}
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("pod %s bound to %s while %s", p.Name, p.Spec.NodeName, while)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
					reason = c.Message
				}
			}
		}
		return reason != "", nil
	})
	if err != nil {
		t.Fatalf("pending pods of %s/%s*: %v", namespace, prefix, err)
	}
	return reason
}

// podGroupReasons joins the messages of the namespace's PodGroups' conditions.
func podGroupReasons(t *testing.T, namespace string) string {
	t.Helper()
	pgs, err := cl.Volcano.SchedulingV1beta1().PodGroups(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, pg := range pgs.Items {
		for _, c := range pg.Status.Conditions {
			if c.Message != "" {
				out = append(out, pg.Name+": "+c.Message)
			}
		}
	}
	return strings.Join(out, "; ")
}
