package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Volcano's admission webhook: a VolcanoJob that names no scheduler, queue or
// minAvailable gets Volcano's defaults (volcano, default, every replica) and its vGPU
// tasks run with their cards; a job asking for more members than it has replicas is
// refused at create with Volcano's message.
func TestWebhookDefaultsAndRefusesJobs(t *testing.T) {
	n := ns(t, "webhook")
	defer cleanup(t, n)
	ctx := context.Background()
	plain := workload.Job(n, "plain", "", 0,
		workload.Task{Name: "trainer", Replicas: 2, Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 50, Cores: 50}}},
		workload.Task{Name: "eval", Replicas: 1, Containers: []workload.Container{{Name: "main", Cards: 1, MemMiB: 4096, Cores: 20}}})
	plain.Spec.SchedulerName = ""
	got, err := cl.Volcano.BatchV1alpha1().Jobs(n).Create(ctx, plain, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create job without defaults: %v", err)
	}
	if got.Spec.SchedulerName != "volcano" || got.Spec.Queue != "default" || got.Spec.MinAvailable != 3 {
		t.Errorf("job defaults: schedulerName %q, queue %q, minAvailable %d; want volcano, default, 3",
			got.Spec.SchedulerName, got.Spec.Queue, got.Spec.MinAvailable)
	}
	t.Logf("defaulted: schedulerName %q, queue %q, minAvailable %d, maxRetry %d",
		got.Spec.SchedulerName, got.Spec.Queue, got.Spec.MinAvailable, got.Spec.MaxRetry)
	for _, task := range got.Spec.Tasks {
		if task.MinAvailable == nil || *task.MinAvailable != task.Replicas {
			t.Errorf("task %s: minAvailable %v, want its %d replicas", task.Name, task.MinAvailable, task.Replicas)
		}
	}
	pods, err := workload.WaitPods(ctx, cl.Client, n, "plain", 2*time.Minute, workload.AllPhase(3, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.SchedulerName != "volcano" {
			t.Errorf("pod %s: schedulerName %q", p.Name, p.Spec.SchedulerName)
		}
	}
	checkHandoff(t, pods)
	noOvercommit(t)
	pgs, err := cl.Volcano.SchedulingV1beta1().PodGroups(n).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pgs.Items) != 1 {
		t.Errorf("%d PodGroups in %s, want 1", len(pgs.Items), n)
	}
	for _, pg := range pgs.Items {
		if pg.Spec.Queue != "default" || pg.Spec.MinMember != 3 {
			t.Errorf("PodGroup %s: queue %q, minMember %d; want default, 3", pg.Name, pg.Spec.Queue, pg.Spec.MinMember)
		}
	}

	tooMany := workload.Job(n, "too-many", "default", 4,
		workload.Task{Name: "w", Replicas: 2, Containers: []workload.Container{{Name: "main", Cards: 1, Cores: 50}}})
	_, err = cl.Volcano.BatchV1alpha1().Jobs(n).Create(ctx, tooMany, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("a job with minAvailable 4 over 2 replicas was accepted")
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{`admission webhook "validatejob.volcano.sh" denied the request`,
		"job 'minAvailable' should not be greater than total replicas in tasks"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := cl.Volcano.BatchV1alpha1().Jobs(n).Get(ctx, "too-many", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused job: get returned %v, want not found", err)
	}
}
