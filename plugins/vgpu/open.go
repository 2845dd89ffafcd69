package vgpu

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// Session open: the session's nodes and pods read into the card book.

// buildLedger reads every node's cards and books what the pods on it hold. A node
// with bound vGPU pods the session does not hold (loading) takes no vGPU task.
func (p *vgpuPlugin) buildLedger(ssn *framework.Session, loading map[string]int) *book.Ledger {
	l := book.NewLedger()
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
		if ni.Node.Annotations[api.AnnotationCardAPI] == api.CardAPIDRA {
			// Its agent serves the cards as DRA devices: no vGPU slots for the kubelet to
			// hand out, so a vGPU pod placed here would be refused at admission.
			l.MarkUnusable(name, draNodeReason)
			continue
		}
		inv, err := p.dec.NodeInventory(ni.Node, now, p.args.HeartbeatTimeout)
		if err != nil {
			l.MarkUnusable(name, err.Error())
			klog.V(4).InfoS("Node's vGPU inventory is unusable", "node", name, "err", err)
			continue
		}
		if inv == nil {
			continue
		}
		n := placement.NewNode(name, inv, p.args.MemoryOversubscription)
		if missing := loading[name]; missing > 0 {
			l.MarkUnusable(name, loadingReason(missing))
			continue
		}
		if ni.Node.Spec.Unschedulable {
			l.MarkCordoned(name)
		}
		for _, task := range ni.Tasks {
			p.accountTask(n, task)
		}
		l.AddNode(n)
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
	cs, tenancy, ok, err := p.holdings.Of(task)
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
	for _, err := range n.Account(cs, tenancy) {
		klog.ErrorS(err, "Accounting an existing vGPU assignment", "pod", klog.KRef(task.Namespace, task.Name))
	}
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
			if task.Pod.Spec.NodeName != "" || !book.HasAssignment(task.Pod) {
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

// sessionPodView tells the in-flight store what the session knows about a pod.
func sessionPodView(ssn *framework.Session, dec *api.Decoders) func(types.UID) book.PodView {
	tasks := map[types.UID]*vapi.TaskInfo{}
	for _, job := range ssn.Jobs {
		for id, t := range job.Tasks {
			tasks[types.UID(id)] = t
		}
	}
	return func(uid types.UID) book.PodView {
		t, ok := tasks[uid]
		switch {
		case !ok:
			return book.PodAbsent
		case t.Pod != nil && t.Pod.Spec.NodeName != "" && book.ConfirmedOn(dec, t.Pod):
			return book.PodConfirmed
		case t.Status == vapi.Pending || t.Status == vapi.Pipelined:
			return book.PodUnplaced
		}
		return book.PodInFlight
	}
}

// draNodeReason is why a vGPU task does not fit a node whose agent runs the DRA driver.
const draNodeReason = "the node's cards are DRA devices (" + api.AnnotationCardAPI + ": " + api.CardAPIDRA +
	"): vGPU pods run there through ResourceClaims of driver vgpu.tessera.io"
