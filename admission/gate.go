package admission

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// QueueShareGate is the scheduling gate the webhook puts on vGPU pods when QueueGate is
// on. The vgpu scheduler plugin removes it (plugins/vgpu/gate.go) once the pod's queue
// would admit the pod's gang under its card share. Kubernetes lets a gate be removed
// after creation but never added, so it can only be put on here.
const QueueShareGate = api.SchedulingGateQueueShare

// gatePatch adds QueueShareGate to a pod being created, after any gates it already
// has; nothing when it lists the gate already.
func gatePatch(pod *corev1.Pod) []PatchOp {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == QueueShareGate {
			return nil
		}
	}
	gate := corev1.PodSchedulingGate{Name: QueueShareGate}
	// An empty list is absent from the object the API server sends (omitempty).
	if len(pod.Spec.SchedulingGates) == 0 {
		return []PatchOp{{Op: "add", Path: "/spec/schedulingGates", Value: []corev1.PodSchedulingGate{gate}}}
	}
	return []PatchOp{{Op: "add", Path: "/spec/schedulingGates/-", Value: gate}}
}
