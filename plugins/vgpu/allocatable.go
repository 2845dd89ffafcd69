package vgpu

import (
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// allocatable holds a vGPU task to its queue's share, and, while Volcano's preempt
// tries it on a node, to that node's cards (cardsFreedFor). A refusal is written as the
// task's fit error, so the pod's condition and the PodGroup's event say why.
func (p *vgpuPlugin) allocatable(queue *vapi.QueueInfo, task *vapi.TaskInfo) bool {
	tr := p.request(task)
	if tr == nil || tr.Err != nil {
		return true
	}
	if !p.cardsFreedFor(task, tr) {
		return false
	}
	if p.shares == nil {
		return true
	}
	ok, why := p.shares.Admit(queue.UID, p.shares.Cost(tr.Req.Containers))
	if ok {
		return true
	}
	tr.Refused.Add(book.PendingQueueShare)
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
