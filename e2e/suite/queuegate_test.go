package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/admission"
	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// queueGateConfig turns the webhook's queue gate on.
const queueGateConfig = `version: v1
schedulerName: volcano
defaultQueue: default
queueGate: true
`

// holdGate is another controller's gate: it keeps queue gate-b's pods pending, so that
// they count for gate-b's share of the cards without holding any.
const holdGate = "example.com/e2e-hold"

// gatePod is a bare pod of queue asking one whole card (100 cores, 4 GiB).
func gatePod(name, queue string, gates ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"queue": queue},
		Annotations: map[string]string{admission.PodQueueAnnotation: queue}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "infinity"},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(workload.RequestCPU),
					corev1.ResourceMemory: resource.MustParse(workload.RequestMemory)},
				Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"), api.ResourceMemory: resource.MustParse("4096"),
					api.ResourceCores: resource.MustParse("100")}}}}}}
	for _, g := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return p
}

func hasGate(p corev1.Pod, gate string) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == gate {
			return true
		}
	}
	return false
}

// scheduledCondition is the pod's PodScheduled condition's reason, "" without one.
func scheduledCondition(p corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return ""
}

// The queue gate (docs/queues.md) with the webhook's queueGate on: queues gate-a and
// gate-b of equal weight each ask for more whole cards than half the cluster; gate-b's
// pods are held pending by another controller's gate, so the cards stay free. gate-a's
// pods are ungated and run up to its half; the rest keep the gate, with no
// Unschedulable condition for an autoscaler to see, although cards are free, and their
// PodGroups say why. When one of gate-a's pods ends, one more gated pod loses its gate
// and runs.
func TestQueueGate(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "queuegate")
	queue(t, "gate-a", 1)
	queue(t, "gate-b", 1)
	nsObj, err := cl.Client.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[cluster.AdmissionLabel] = "on"
	if _, err := cl.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The scheduler removes the gate with a patch: the chart grants it with queueGate on.
	restoreRBAC, err := cl.ApplyChartRBAC(ctx, nil, "--set", "admission.config.queueGate=true")
	if err != nil {
		t.Fatalf("the chart's RBAC with admission.config.queueGate: %v", err)
	}
	a, err := cl.StartAdmission(ctx, queueGateConfig)
	if err != nil {
		t.Fatalf("start tessera-admission: %v", err)
	}
	defer func() {
		a.Stop()
		_ = cl.Client.CoreV1().Pods(n).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{})
		cleanup(t, n)
		if err := restoreRBAC(); err != nil {
			t.Errorf("putting the harness's RBAC back: %v", err)
		}
		for _, q := range []string{"gate-a", "gate-b"} {
			_ = cl.Volcano.SchedulingV1beta1().Queues().Delete(ctx, q, metav1.DeleteOptions{})
		}
	}()

	const each = 20
	for i := 0; i < each; i++ {
		for _, p := range []*corev1.Pod{gatePod(fmt.Sprintf("b-%02d", i), "gate-b", holdGate), gatePod(fmt.Sprintf("a-%02d", i), "gate-a")} {
			got, err := cl.Client.CoreV1().Pods(n).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !hasGate(*got, admission.QueueShareGate) {
				t.Fatalf("pod %s created with gates %v, want %s", got.Name, got.Spec.SchedulingGates, admission.QueueShareGate)
			}
		}
	}

	list := func(ctx context.Context, q string) ([]corev1.Pod, error) {
		l, err := cl.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{LabelSelector: "queue=" + q})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	// count splits gate-a's pods into those still gated and those running.
	count := func(pods []corev1.Pod) (gated, running int) {
		for _, p := range pods {
			switch {
			case hasGate(p, admission.QueueShareGate):
				gated++
			case p.Status.Phase == corev1.PodRunning:
				running++
			}
		}
		return gated, running
	}
	var pods []corev1.Pod
	settled := func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = list(ctx, "gate-a"); err != nil {
			return false, nil
		}
		gated, running := count(pods)
		return gated > 0 && running > 0 && gated+running == each, nil
	}
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, settled); err != nil {
		t.Fatalf("gate-a never settled at its share: %s", workload.Summary(pods))
	}
	gated, running := count(pods)
	t.Logf("gate-a: %d pods running, %d gated, %s after creation", running, gated, time.Since(start).Round(100*time.Millisecond))
	// Several sessions later the share still holds them.
	time.Sleep(5 * time.Second)
	if pods, err = list(ctx, "gate-a"); err != nil {
		t.Fatal(err)
	}
	if g, r := count(pods); g != gated || r != running {
		t.Fatalf("5 s later gate-a has %d running and %d gated, was %d and %d", r, g, running, gated)
	}
	for _, p := range pods {
		cond := scheduledCondition(p)
		if strings.HasSuffix(cond, corev1.PodReasonUnschedulable) {
			t.Errorf("pod %s is reported %s", p.Name, cond)
		}
		if hasGate(p, admission.QueueShareGate) {
			if cond != "False/"+corev1.PodReasonSchedulingGated {
				t.Errorf("gated pod %s: PodScheduled %q, want False/SchedulingGated", p.Name, cond)
			}
		}
	}
	idle := 0
	for _, u := range noOvercommit(t) {
		if len(u.Holders) == 0 {
			idle++
		}
	}
	t.Logf("cards with no holder while gate-a's pods wait gated: %d", idle)

	// Its PodGroup says why.
	var why string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cl.Client.CoreV1().Events(n).List(ctx, metav1.ListOptions{FieldSelector: "reason=QueueShareGated"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		why = evs.Items[0].Message
		return true, nil
	})
	if err != nil || !strings.Contains(why, "queue gate-a is at its share") || !strings.Contains(why, "cores") {
		t.Errorf("QueueShareGated event %q (%v), want one naming queue gate-a and cores", why, err)
	} else {
		t.Logf("event: %s", why)
	}

	// One of gate-a's pods ends: one more is ungated and runs.
	var victim string
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			victim = p.Name
			break
		}
	}
	if err := cl.Client.CoreV1().Pods(n).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if pods, err = list(ctx, "gate-a"); err != nil {
			return false, nil
		}
		g, r := count(pods)
		return g == gated-1 && r == running, nil
	})
	if err != nil {
		t.Fatalf("after %s ended, gate-a never ran one more pod: %s", victim, workload.Summary(pods))
	}
	t.Logf("%s deleted; one more gate-a pod ungated and running %s later", victim, time.Since(freed).Round(100*time.Millisecond))
	if g, _ := count(pods); g != gated-1 {
		t.Errorf("%d gated, want %d", g, gated-1)
	}
	checkRunningHandoffs(t, n)
}
