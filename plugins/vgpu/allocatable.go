package vgpu

import (
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// allocatable holds a vGPU task to its queue's share, and, while Volcano's preempt
// tries it on a node, to that node's cards (cardsFreedFor). A refusal is written as the
// task's fit error, so the pod's condition and the PodGroup's event say why.
func (p *vgpuPlugin) allocatable(queue *vapi.QueueInfo, task *vapi.TaskInfo) bool {
	tr := p.request(task)
	if tr == nil {
		// A pod using ResourceClaims of Tessera's DRA driver is held to the same
		// share by what its claims ask (draclaims.go); its node and card are the
		// Kubernetes allocator's.
		if cost, ok := p.claimCost(task); ok {
			return p.withinShare(queue, task, cost, nil)
		}
		return true
	}
	if tr.Err != nil {
		return true
	}
	if !p.cardsFreedFor(task, tr) {
		return false
	}
	if p.shares == nil {
		return true
	}
	return p.withinShare(queue, task, p.shares.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly), &tr.Refused)
}

// withinShare asks the queue share whether the task's queue may place cost, and
// writes a refusal as the task's fit error; refused, when set, counts it for the
// pending metric.
func (p *vgpuPlugin) withinShare(queue *vapi.QueueInfo, task *vapi.TaskInfo, cost fairshare.Amount, refused *book.Refusals) bool {
	ok, why := p.shares.Admit(queue.UID, cost)
	if ok {
		return true
	}
	if refused != nil {
		refused.Add(book.PendingQueueShare)
	}
	if job, found := p.ssn.Jobs[task.Job]; found {
		fe := vapi.NewFitErrors()
		fe.SetError(why)
		// The predicate asks Allocatable too (evictionCouldHelp), from Volcano's
		// parallel workers: the job's map is written under the plugin's lock.
		p.fitErrMu.Lock()
		job.NodesFitErrors[task.UID] = fe
		p.fitErrMu.Unlock()
	}
	klog.V(3).InfoS("vGPU task held to its queue's share", "task", klog.KRef(task.Namespace, task.Name), "reason", why)
	return false
}

// cardsFreedFor is false while Volcano's preempt tries the task on a node whose cards
// will not take it even once the pods being evicted there are gone. Preempt evicts
// victims one by one until the session may allocate the task and its CPU, memory and
// slots fit the node, then pipelines it; asked nothing of cards, it would stop before
// evicting any (the CPU fits) and pipeline the task onto cards still held, for the
// plugin to refuse. The node is the one whose victims the plugin was last asked for
// (victims), forgotten when Volcano starts on the task again (prePredicate).
func (p *vgpuPlugin) cardsFreedFor(task *vapi.TaskInfo, tr *book.TaskRequest) bool {
	v, ok := p.evictingOn.Load(task.UID)
	if !ok {
		return true
	}
	node, ok := p.ssn.Nodes[v.(string)]
	if !ok {
		return true
	}
	future := p.futureNode(node)
	if future == nil {
		return false
	}
	_, ferr := placement.FitPod(future, tr.Req)
	if ferr != nil {
		klog.V(4).InfoS("vGPU task waits for evictions to free cards", "task", klog.KRef(task.Namespace, task.Name),
			"node", node.Name)
	}
	return ferr == nil
}
