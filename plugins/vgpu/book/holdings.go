package book

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// Holdings answers, for one session, what cards a placed task holds: its pod's
// assignment when the pod is bound to the node that assignment names, or this
// scheduler's in-flight one while the informer has not caught up.
//
// An assignment on a pod that is not bound is not truth: Volcano writes the
// session's copy of a pod back without binding it (a pipelined gang's condition, a
// failed bind), so such a pod can carry cards it was never given.
type Holdings struct {
	dec      *api.Decoders
	inFlight *InFlight
	names    api.ResourceNames
	// mu guards bound, which the parallel predicates fill (eviction candidates).
	mu sync.RWMutex
	// bound memoises what bound pods hold: a bound pod's annotations do not change
	// within a session.
	bound map[vapi.TaskID]held
}

// held is a bound task's holding as its annotations state it.
type held struct {
	cs  []api.ContainerAssignment
	t   placement.Tenancy
	ok  bool
	err error
}

// NewHoldings reads assignments through dec and, for pods the informer has not
// shown back yet, from inFlight; names are the vGPU resources of the containers.
func NewHoldings(dec *api.Decoders, inFlight *InFlight, names api.ResourceNames) *Holdings {
	return &Holdings{dec: dec, inFlight: inFlight, names: names, bound: map[vapi.TaskID]held{}}
}

// Of returns the cards a placed task holds and how (its QoS class from the
// assignment, idle-only from its pod's card policy); ok is false when neither its pod
// nor the in-flight store says, err when its pod's assignment is malformed.
func (h *Holdings) Of(task *vapi.TaskInfo) (cs []api.ContainerAssignment, t placement.Tenancy, ok bool, err error) {
	if task.Pod.Spec.NodeName != "" {
		h.mu.RLock()
		b, seen := h.bound[task.UID]
		h.mu.RUnlock()
		if !seen {
			b.cs, b.t, b.ok, b.err = h.boundCards(task)
			h.mu.Lock()
			h.bound[task.UID] = b
			h.mu.Unlock()
		}
		if b.ok || b.err != nil {
			return b.cs, b.t, b.ok, b.err
		}
	}
	if a, found := h.inFlight.Get(types.UID(task.UID)); found {
		return a.Containers, placement.Tenancy{QoS: a.QoS, IdleOnly: api.HoldsIdleOnly(task.Pod.Annotations)}, true, nil
	}
	return nil, placement.Tenancy{}, false, nil
}

// boundCards reads what a bound pod's annotations say it holds, unless they name
// another node than the one it is bound to.
func (h *Holdings) boundCards(task *vapi.TaskInfo) (cs []api.ContainerAssignment, t placement.Tenancy, ok bool, err error) {
	bound := task.Pod.Spec.NodeName
	if node, named := assignedNode(h.dec, task.Pod); named && node != bound {
		klog.InfoS("Ignoring a vGPU assignment for another node than the pod's", "pod", klog.KRef(task.Namespace, task.Name),
			"boundTo", bound, "assignedOn", node)
		return nil, placement.Tenancy{}, false, nil
	}
	cs, qos, ok, err := h.dec.PodCards(task.Pod, h.names)
	return cs, placement.Tenancy{QoS: qos, IdleOnly: api.HoldsIdleOnly(task.Pod.Annotations)}, ok, err
}

// assignedNode is the node named by the pod's Tessera assignment, if it has a
// readable one.
func assignedNode(dec *api.Decoders, pod *corev1.Pod) (string, bool) {
	s, found := pod.Annotations[api.AnnotationAssignment]
	if !found {
		return "", false
	}
	a, err := dec.Assignment(s)
	if err != nil {
		return "", false
	}
	return a.Node, true
}

// ConfirmedOn reports whether the pod carries an assignment for the node it is bound to.
func ConfirmedOn(dec *api.Decoders, pod *corev1.Pod) bool {
	node, ok := assignedNode(dec, pod)
	return ok && node == pod.Spec.NodeName
}

// HasAssignment reports whether the pod carries an assignment, Tessera's or Volcano's.
func HasAssignment(pod *corev1.Pod) bool {
	_, t := pod.Annotations[api.AnnotationAssignment]
	_, v := pod.Annotations[api.VolcanoAssignedIDs]
	return t || v
}
