package suite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A claim deleted while its pod starts (docs/dra.md): the pod's claim, made from a
// template, is deleted as soon as the pod is bound. Whatever the kubelet then does with
// the pod, nothing may be lost or kept: once the job is gone the agent holds no prepared
// claim and no claim CDI spec for it, the claim object is gone, and the card's capacity
// is whole again, so a new claim of the same size runs on the node with exactly its
// limits.
func TestDRAClaimDeletedWhileItsPodStarts(t *testing.T) {
	ctx := context.Background()
	defer startDRA(t)()
	namespace := ns(t, "dra-claimdel")
	defer cleanup(t, namespace)
	claimTemplate(t, namespace, "share-4g-30", "4096Mi", "30")
	cards := draCards(t, "gpu-dra1")
	before := draCheckpointClaims(t, "gpu-dra1")

	submit(t, draJob(namespace, "doomed", "share-4g-30", "gpu-dra1", 1))
	var pod corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "volcano.sh/job-name=doomed"})
		if err != nil || len(ps.Items) != 1 {
			return false, nil
		}
		pod = ps.Items[0]
		st := pod.Status.ResourceClaimStatuses
		return pod.Spec.NodeName != "" && len(st) == 1 && st[0].ResourceClaimName != nil, nil
	}); err != nil {
		t.Fatalf("the pod was never bound with its claim: %v", err)
	}
	claim := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	if err := cl.Client.ResourceV1().ResourceClaims(namespace).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting claim %s: %v", claim, err)
	}
	deletedAt := time.Now()

	// What the cluster makes of it, for the log: the claim is held by its finalizer while
	// the pod is reserved for it, and the pod runs or waits.
	time.Sleep(10 * time.Second)
	cur, err := cl.Client.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cl.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		t.Logf("claim %s gone 10 s after its deletion; pod %s is %s", claim, pod.Name, cur.Status.Phase)
	case err != nil:
		t.Fatal(err)
	default:
		t.Logf("claim %s still there 10 s after its deletion (being deleted: %t, finalizers %v, reserved for %d); pod %s is %s",
			claim, c.DeletionTimestamp != nil, c.Finalizers, len(c.Status.ReservedFor), pod.Name, cur.Status.Phase)
		if c.DeletionTimestamp == nil {
			t.Errorf("claim %s is not being deleted", claim)
		}
	}
	if cur.Status.Phase == corev1.PodRunning {
		checkDRAContainer(t, *cur, cards, 4096, 30)
	}

	// The job goes: nothing stays prepared, the claim object goes with its pod.
	if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		specs, _ := filepath.Glob(filepath.Join(cl.CDIDir("gpu-dra1"), "vgpu.tessera.io-claim_*"))
		_, err := cl.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
		return len(draCheckpointClaims(t, "gpu-dra1")) == len(before) && len(specs) == len(before) && apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("after the job was deleted gpu-dra1 still prepares %v (before %v), or claim %s is still there: %v",
			draCheckpointClaims(t, "gpu-dra1"), before, claim, err)
	}
	t.Logf("claim and pod gone, nothing prepared, %s after the claim's deletion", time.Since(deletedAt).Round(100*time.Millisecond))

	// The card's capacity is whole again: a new claim of the same size gets it.
	submit(t, draJob(namespace, "next", "share-4g-30", "gpu-dra1", 1))
	next := waitDRAPods(t, namespace, "next", 1)
	checkDRAContainer(t, next[0], cards, 4096, 30)
}
