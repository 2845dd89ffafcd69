package vgpu

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// buildLedger reads every node's cards and books what the pods on it hold. A node
// with bound vGPU pods the session does not hold (loading) takes no vGPU task.
func (p *vgpuPlugin) buildLedger(ssn *framework.Session, loading map[string]int) *ledger {
	l := newLedger()
	now := p.now()
	// Nodes are added in the order Volcano walks them (its node list), so that a
	// task's predicates read the answer table's row in order.
	nodes := ssn.NodeList
	if len(nodes) != len(ssn.Nodes) {
		nodes = make([]*vapi.NodeInfo, 0, len(ssn.Nodes))
		for _, ni := range ssn.Nodes {
			nodes = append(nodes, ni)
		}
	}
	for _, ni := range nodes {
		if ni == nil || ni.Node == nil {
			continue
		}
		name := ni.Name
		inv, err := p.dec.NodeInventory(ni.Node, now, p.args.HeartbeatTimeout)
		if err != nil {
			l.markUnusable(name, err.Error())
			klog.V(4).InfoS("Node's vGPU inventory is unusable", "node", name, "err", err)
			continue
		}
		if inv == nil {
			continue
		}
		n := placement.NewNode(name, inv, p.args.MemoryOversubscription)
		if missing := loading[name]; missing > 0 {
			l.markUnusable(name, loadingReason(missing))
			continue
		}
		if ni.Node.Spec.Unschedulable {
			l.markCordoned(name)
		}
		for _, task := range ni.Tasks {
			p.accountTask(n, task)
		}
		l.addNode(n)
	}
	return l
}

// accountTask books the cards a task on the node already holds: from its pod's
// annotation, or from this scheduler's in-flight store when the informer has not
// caught up yet.
func (p *vgpuPlugin) accountTask(n *placement.Node, task *vapi.TaskInfo) {
	if task.Pod == nil || !p.args.Resources.HasVGPURequest(task.Pod) {
		return
	}
	cs, qos, ok, err := p.heldCards(task)
	if err != nil {
		klog.ErrorS(err, "Pod on node carries a malformed vGPU assignment; its cards cannot be accounted",
			"pod", klog.KRef(task.Namespace, task.Name), "node", n.Name)
		return
	}
	if !ok {
		klog.V(2).InfoS("vGPU pod on node has no assignment; its cards cannot be accounted",
			"pod", klog.KRef(task.Namespace, task.Name), "node", n.Name, "status", task.Status)
		return
	}
	for _, err := range n.Account(cs, qos) {
		klog.ErrorS(err, "Accounting an existing vGPU assignment", "pod", klog.KRef(task.Namespace, task.Name))
	}
}

// heldCards returns the cards a placed task holds: its pod's assignment when the
// pod is bound to the node that assignment names, or this scheduler's in-flight one
// while the informer has not caught up; ok is false when neither is known.
//
// An assignment on a pod that is not bound is not truth: Volcano writes the
// session's copy of a pod back without binding it (a pipelined gang's condition, a
// failed bind), so such a pod can carry cards it was never given.
func (p *vgpuPlugin) heldCards(task *vapi.TaskInfo) (cs []api.ContainerAssignment, qos api.QoSClass, ok bool, err error) {
	if task.Pod.Spec.NodeName != "" {
		// A bound pod's annotations do not change within a session: read them once.
		p.mu.RLock()
		h, seen := p.bound[task.UID]
		p.mu.RUnlock()
		if !seen {
			h.cs, h.qos, h.ok, h.err = p.boundCards(task)
			p.mu.Lock()
			p.bound[task.UID] = h
			p.mu.Unlock()
		}
		if h.ok || h.err != nil {
			return h.cs, h.qos, h.ok, h.err
		}
	}
	if a, found := p.store.get(types.UID(task.UID)); found {
		return a.Containers, a.QoS, true, nil
	}
	return nil, "", false, nil
}

// boundCards reads what a bound pod's annotations say it holds, unless they name
// another node than the one it is bound to.
func (p *vgpuPlugin) boundCards(task *vapi.TaskInfo) (cs []api.ContainerAssignment, qos api.QoSClass, ok bool, err error) {
	bound := task.Pod.Spec.NodeName
	if node, named := p.dec.assignedNode(task.Pod); named && node != bound {
		klog.InfoS("Ignoring a vGPU assignment for another node than the pod's", "pod", klog.KRef(task.Namespace, task.Name),
			"boundTo", bound, "assignedOn", node)
		return nil, "", false, nil
	}
	return p.dec.PodCards(task.Pod, p.args.Resources)
}

// heldOnce is a bound task's holding as its annotations state it.
type heldOnce struct {
	cs  []api.ContainerAssignment
	qos api.QoSClass
	ok  bool
	err error
}

// assignedNode is the node named by the pod's Tessera assignment, if it has a
// readable one.
func (d *decoders) assignedNode(pod *corev1.Pod) (string, bool) {
	s, found := pod.Annotations[api.AnnotationAssignment]
	if !found {
		return "", false
	}
	a, err := d.Assignment(s)
	if err != nil {
		return "", false
	}
	return a.Node, true
}

// scrubUnbound drops, from the session's copy of each pending vGPU pod, an assignment
// it carries without being bound (written back by Volcano without a bind), so that it
// can neither be trusted nor travel on a later Binding. (Pending vGPU tasks are never
// BestEffort to Volcano: a valid request names volcano.sh/vgpu-number, which Volcano
// counts, so backfill never places them outside their gang and queue share.)
func (p *vgpuPlugin) scrubUnbound(ssn *framework.Session) (scrubbed int) {
	for _, job := range ssn.Jobs {
		for _, task := range job.TaskStatusIndex[vapi.Pending] {
			if task.Pod == nil || !p.args.Resources.HasVGPURequest(task.Pod) {
				continue
			}
			if task.Pod.Spec.NodeName != "" || !hasAssignment(task.Pod) {
				continue
			}
			pod := task.Pod.DeepCopy()
			for _, k := range assignmentKeys {
				delete(pod.Annotations, k)
			}
			task.Pod = pod
			scrubbed++
			klog.V(2).InfoS("Dropped a vGPU assignment from an unbound pod; it was never bound with it",
				"pod", klog.KRef(task.Namespace, task.Name))
		}
	}
	return scrubbed
}

// assignmentKeys are the annotations the plugin writes with an assignment.
var assignmentKeys = []string{api.AnnotationAssignment, api.AnnotationAssignmentSignature, api.AnnotationAssignedAt, api.AnnotationHandoff,
	api.VolcanoAssignedIDs, api.VolcanoDevicesToAllocate, api.VolcanoAssignedNode, api.VolcanoAssignedTime,
	api.VolcanoBindPhase, api.VolcanoBindTime}

// confirmedOn reports whether the pod carries an assignment for the node it is bound to.
func (d *decoders) confirmedOn(pod *corev1.Pod) bool {
	node, ok := d.assignedNode(pod)
	return ok && node == pod.Spec.NodeName
}

func hasAssignment(pod *corev1.Pod) bool {
	_, t := pod.Annotations[api.AnnotationAssignment]
	_, v := pod.Annotations[api.VolcanoAssignedIDs]
	return t || v
}

// sessionPodView tells the in-flight store what the session knows about a pod.
func (d *decoders) sessionPodView(ssn *framework.Session) func(types.UID) podView {
	tasks := map[types.UID]*vapi.TaskInfo{}
	for _, job := range ssn.Jobs {
		for id, t := range job.Tasks {
			tasks[types.UID(id)] = t
		}
	}
	return func(uid types.UID) podView {
		t, ok := tasks[uid]
		switch {
		case !ok:
			return podAbsent
		case t.Pod != nil && t.Pod.Spec.NodeName != "" && d.confirmedOn(t.Pod):
			return podConfirmed
		case t.Status == vapi.Pending || t.Status == vapi.Pipelined:
			return podUnplaced
		}
		return podInFlight
	}
}

// predicate refuses nodes whose cards cannot take the task.
func (p *vgpuPlugin) predicate(task *vapi.TaskInfo, node *vapi.NodeInfo) error {
	tr := p.request(task)
	if tr == nil {
		return nil
	}
	if tr.err != nil {
		return unresolvable(task, node, "vgpu: "+tr.err.Error())
	}
	defer p.metrics.timed("predicate", time.Now())
	a, why := p.ledger.answer(node.Name, tr.shape, tr.req)
	refused := a.refused
	if why == "" && refused == nil && p.pipelined.onNode(node.Name) {
		// The remembered answer is the node's bookings'; the tasks this session
		// pipelined there expect cards too, and Volcano, which checks only CPU, memory
		// and slots, would pipeline this one beside them for the plugin to refuse.
		if ferr := p.fitBesidePipelines(node.Name, tr.req); ferr != nil {
			refused = noteOf(ferr)
			if v := klog.V(5); v.Enabled() {
				v.InfoS("vGPU fit beside the node's pipelined tasks failed", "task", klog.KRef(task.Namespace, task.Name),
					"node", node.Name, "detail", ferr.Detail())
			}
		}
	}
	switch {
	case why != "":
		tr.refused.add(pendingNoInventory)
		return unresolvable(task, node, "vgpu: "+why)
	case refused != nil:
		tr.refused.add(refused.kind)
		if v := klog.V(5); v.Enabled() {
			// The card-by-card account is logged where the engine refuses (ledger.answer).
			v.InfoS("vGPU fit failed", "task", klog.KRef(task.Namespace, task.Name), "node", node.Name, "reason", refused.reason)
		}
		// Preempt and reclaim try only nodes where evicting could help: enough cards
		// refuse for usage alone, and the tasks this one may evict hold them.
		code := vapi.UnschedulableAndUnresolvable
		if refused.resolvable && (p.ssn == nil || p.evictionCouldHelp(p.ssn, task, node, tr)) {
			code = vapi.Unschedulable
		}
		return vapi.NewFitErrWithStatus(task, node, &vapi.Status{Code: code, Reason: refused.reason})
	}
	return nil
}

// fitBesidePipelines fits the request on the node's booked cards with the session's
// pipelined tasks there in place.
func (p *vgpuPlugin) fitBesidePipelines(node string, req *placement.Request) *placement.FitError {
	n := p.ledger.clone(node)
	if n == nil {
		return nil
	}
	p.pipelined.each(node, func(f pipelinedFit) { n.Account(f.containers, f.qos) })
	_, ferr := placement.FitPod(n, req)
	return ferr
}

func unresolvable(task *vapi.TaskInfo, node *vapi.NodeInfo, reason string) error {
	return vapi.NewFitErrWithStatus(task, node, &vapi.Status{Code: vapi.UnschedulableAndUnresolvable, Reason: reason})
}

// nodeOrder scores a node by where the task's cards would go; 0 for other tasks.
func (p *vgpuPlugin) nodeOrder(task *vapi.TaskInfo, node *vapi.NodeInfo) (float64, error) {
	tr := p.request(task)
	if tr == nil || tr.err != nil {
		return 0, nil
	}
	defer p.metrics.timed("node_order", time.Now())
	s, ok := p.ledger.cachedScore(node.Name, tr.shape, tr.req)
	if !ok {
		return 0, nil
	}
	return s * p.args.Weight, nil
}
