package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Gang: an 8-member job of whole cards lands all at once; a gang that needs more whole
// cards than the cluster has (8 x 4 > 24) holds no card at all and its PodGroup says why.
func TestGangAllOrNothing(t *testing.T) {
	n := ns(t, "gang")
	defer cleanup(t, n)
	fits := workload.Job(n, "fits", "default", 8, workload.Task{Name: "w", Replicas: 8,
		Containers: []workload.Container{{Name: "trainer", Cards: 2, Cores: 100}}})
	tooBig := workload.Job(n, "too-big", "default", 8, workload.Task{Name: "w", Replicas: 8,
		Containers: []workload.Container{{Name: "trainer", Cards: 4, Cores: 100}}})
	submit(t, fits)
	pods, err := workload.WaitPods(context.Background(), cl.Client, n, "fits", 2*time.Minute, workload.AllPhase(8, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkHandoff(t, pods)
	noOvercommit(t)
	// The fitting gang holds 16 whole cards; 8 remain, the big gang needs 32.
	submit(t, tooBig)
	reason, err := podGroupVGPUReason(n, "too-big", 90*time.Second)
	if err != nil {
		t.Fatalf("PodGroup of too-big never reports the vgpu plugin's reason: %v", err)
	}
	t.Logf("too-big PodGroup: %s", reason)
	big, err := workload.Pods(context.Background(), cl.Client, n, "too-big")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range big {
		if p.Spec.NodeName != "" || p.Annotations[api.AnnotationAssignment] != "" {
			t.Errorf("pod %s of the unfit gang got node %q, assignment %q", p.Name, p.Spec.NodeName, p.Annotations[api.AnnotationAssignment])
		}
	}
	l := noOvercommit(t)
	for _, u := range l {
		for _, h := range u.Holders {
			if strings.HasPrefix(h.Pod, "too-big") {
				t.Errorf("card %s/%d held by %s of the unfit gang", u.Node, u.Card.Index, h.Pod)
			}
		}
	}
}

// podGroupVGPUReason waits for the PodGroup of the job named job to carry the vgpu
// plugin's reason in an Unschedulable condition (until its pods exist the PodGroup may
// carry Volcano's generic "pod group is not ready"), and returns reason and message.
func podGroupVGPUReason(n, job string, timeout time.Duration) (string, error) {
	var reason string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pgs, err := cl.Volcano.SchedulingV1beta1().PodGroups(n).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, pg := range pgs.Items {
			if !strings.HasPrefix(pg.Name, job+"-") {
				continue
			}
			for _, c := range pg.Status.Conditions {
				if c.Type == "Unschedulable" && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "vgpu: ") {
					reason = c.Reason + ": " + c.Message
					return true, nil
				}
			}
		}
		return false, nil
	})
	return reason, err
}
