package suite

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Deleting a running VolcanoJob, and then a namespace with one, frees their cards as in
// a cluster: kube-controller-manager's garbage collector removes the job's pods and
// PodGroup, its namespace controller empties and removes the namespace, and the
// kubelets stop the containers.
func TestDeletingJobsAndNamespacesFreesCards(t *testing.T) {
	ctx := context.Background()
	n := ns(t, "gc")
	defer cleanup(t, n)
	job := func(name string) {
		submit(t, workload.Job(n, name, "default", 4, workload.Task{Name: "w", Replicas: 4,
			Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 25, Cores: 25}}}))
		if _, err := workload.WaitPods(ctx, cl.Client, n, name, 2*time.Minute, workload.AllPhase(4, corev1.PodRunning)); err != nil {
			t.Fatal(err)
		}
	}
	job("first")
	start := time.Now()
	if err := cl.Volcano.BatchV1alpha1().Jobs(n).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitCollected(ctx, n, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("job deleted: pods and PodGroup collected in %s", time.Since(start).Round(100*time.Millisecond))
	noHolders(t, n)

	job("second")
	start = time.Now()
	if err := cl.Client.CoreV1().Namespaces().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cl.Client.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace %s not deleted: %v", n, err)
	}
	t.Logf("namespace deleted with a running job in %s", time.Since(start).Round(100*time.Millisecond))
	noHolders(t, n)
}

// noHolders fails the test if a pod of the namespace still holds a card.
func noHolders(t *testing.T, namespace string) {
	t.Helper()
	for card, u := range noOvercommit(t) {
		for _, h := range u.Holders {
			if h.Namespace == namespace {
				t.Errorf("card %s still held by %s/%s", card, namespace, h.Pod)
			}
		}
	}
}
