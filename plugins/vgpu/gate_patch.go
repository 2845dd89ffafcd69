package vgpu

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// The queue gate on a pod: reading it, and removing it off the session's path (one
// goroutine per session with a few workers, bounded in time; a pod whose patch fails
// keeps its gate and is judged again by the next session).

const (
	// queueShareGate is the gate the admission webhook puts on vGPU pods.
	queueShareGate = api.SchedulingGateQueueShare
	// ungateWorkers is how many patches one session has in flight at once.
	ungateWorkers = 4
	// ungateTimeout bounds one session's patches together.
	ungateTimeout = 10 * time.Second
)

type gateState int

const (
	gateNone    gateState = iota // no gate: Volcano schedules the pod
	gateTessera                  // queueShareGate and no other
	gateOther                    // another controller's gate, with or without Tessera's
)

func gatedBy(pod *corev1.Pod) gateState {
	if pod == nil || len(pod.Spec.SchedulingGates) == 0 {
		return gateNone
	}
	if len(pod.Spec.SchedulingGates) == 1 && pod.Spec.SchedulingGates[0].Name == queueShareGate {
		return gateTessera
	}
	return gateOther
}

// startUngating removes queueShareGate from pods in the background.
func startUngating(client kubernetes.Interface, pods []*corev1.Pod) {
	if client == nil || len(pods) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ungateTimeout)
		defer cancel()
		workqueue.ParallelizeUntil(ctx, ungateWorkers, len(pods), func(i int) {
			ungate(ctx, client, pods[i])
		})
	}()
}

// ungate removes the pod's only gate, Tessera's, as the session saw the pod; logs the
// outcome.
func ungate(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) {
	ref := klog.KObj(pod)
	body, err := ungatePatch(pod)
	if err != nil {
		klog.ErrorS(err, "Cannot build the patch that removes the queue gate", "pod", ref)
		return
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	switch {
	case err == nil:
		klog.V(4).InfoS("Removed the queue gate: the pod's queue admits its gang", "pod", ref, "gate", queueShareGate)
	case apierrors.IsNotFound(err):
		klog.V(4).InfoS("Pod gone before its queue gate was removed", "pod", ref)
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err):
		// The test operations failed: the pod (or its gates) changed since the session
		// read it. The next session decides on what it is now.
		klog.V(2).InfoS("Pod changed since the session read it; its queue gate stays for the next session to judge",
			"pod", ref, "err", err)
	default:
		klog.ErrorS(err, "Cannot remove the queue gate; the next session tries again", "pod", ref)
	}
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// ungatePatch removes Tessera's gate, and nothing else, from the pod as the session
// read it: the tests make the API server refuse it when the pod was replaced (another
// UID) or its gates changed since, instead of removing whatever sits at that index now.
func ungatePatch(pod *corev1.Pod) ([]byte, error) {
	if gatedBy(pod) != gateTessera {
		return nil, fmt.Errorf("pod %s/%s: spec.schedulingGates %v: want exactly [%s]", pod.Namespace, pod.Name, pod.Spec.SchedulingGates, queueShareGate)
	}
	return json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: pod.UID},
		{Op: "test", Path: "/spec/schedulingGates", Value: pod.Spec.SchedulingGates},
		{Op: "remove", Path: "/spec/schedulingGates/0"},
	})
}
