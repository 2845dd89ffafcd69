package suite

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// Pods are force-deleted (grace period 0, as `kubectl delete --force`) the moment the
// kubelet has started their container, while Volcano starts their replacements: a pod
// whose sync the kubelet has already begun when the deletion lands, waiting for its next
// runtime relist, then runs that sync without the pod's allocation records. On a kubelet
// without pod cgroups, as the harness's are (cgroupsPerQOS: false), v1.34.2 went on to an
// in-place resize it cannot make and panicked (nil pointer dereference in
// kuberuntime.doPodResizeAction, after "Missing actuated resource record"), and the node
// stayed NotReady with its pods Terminating (measured: on gpu-d within the first 8
// deletions, 2 runs of 2); the harness's kubelets now run without InPlacePodVerticalScaling.
// Every kubelet keeps running through the churn (a kubelet that exits is restarted by the
// harness and fails the scenario), every node is Ready at the end, and the namespace
// empties.
func TestFaultForceDeleteWhilePodsStart(t *testing.T) {
	n := ns(t, "force-delete")
	defer cleanup(t, n)
	crashedBefore := len(cl.KubeletExits())
	const replicas = 8
	submit(t, workload.Job(n, "churn", "default", 1, workload.Task{Name: "t", Replicas: replicas,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 10, Cores: 10}}}))

	ctx := context.Background()
	seen := map[string]bool{} // record files already acted on
	deleted, quiet := 0, time.Now()
	deadline := time.Now().Add(90 * time.Second)
	for deleted < 60 && time.Now().Before(deadline) && time.Since(quiet) < 20*time.Second &&
		len(cl.KubeletExits()) == crashedBefore {
		for _, node := range nodes {
			entries, err := os.ReadDir(cl.RecordDir(node.Name))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				// <namespace>_<pod>_<uid>_<container>.json, written in CreateContainer; the
				// kubelet starts the container right after.
				parts := strings.Split(strings.TrimSuffix(e.Name(), ".json"), "_")
				if len(parts) != 4 || parts[0] != n || seen[e.Name()] {
					continue
				}
				seen[e.Name()] = true
				uid := types.UID(parts[2])
				err := cl.Client.CoreV1().Pods(n).Delete(ctx, parts[1], metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0)),
					Preconditions: &metav1.Preconditions{UID: &uid}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					t.Fatalf("force-deleting %s: %v", parts[1], err)
				}
				if err == nil {
					deleted++
					quiet = time.Now()
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("force-deleted %d pods right after their container started", deleted)
	if deleted < replicas {
		t.Errorf("only %d pods force-deleted: the churn did not run", deleted)
	}
	for _, e := range cl.KubeletExits()[crashedBefore:] {
		t.Errorf("the kubelet of %s exited by itself (%s) %s after it started; the harness restarts it. Its log %s ends:\n%s",
			e.Node, e.Status, e.RanFor.Round(time.Millisecond), e.Log, e.Tail)
		// Restarted as systemd would: the node is back (before its pods' cleanup below).
		waitKubeletBack(t, e.Node, e.At.Add(e.RestartIn))
	}
	for _, node := range nodes {
		if err := cl.WaitNodeReady(ctx, node.Name, 2*time.Minute); err != nil {
			t.Errorf("after the churn: %v", err)
		}
	}
}

// waitKubeletBack waits until a kubelet started after since has reported its node Ready.
func waitKubeletBack(t *testing.T, node string, since time.Time) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cl.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(since), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the kubelet of %s not back after its restart: %v", node, err)
	}
}
