package vgpu

import (
	"time"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// predicate refuses nodes whose cards cannot take the task.
func (p *vgpuPlugin) predicate(task *vapi.TaskInfo, node *vapi.NodeInfo) error {
	tr := p.request(task)
	if tr == nil {
		return nil
	}
	if tr.Err != nil {
		return unresolvable(task, node, PluginName+": "+tr.Err.Error())
	}
	defer p.metrics.timed("predicate", time.Now())
	a, why := p.ledger.Answer(node.Name, tr.Shape, tr.Req)
	refused := a.Refused
	if why == "" && refused == nil && p.pipelined.OnNode(node.Name) {
		// The remembered answer is the node's bookings'; the tasks this session
		// pipelined there expect cards too, and Volcano, which checks only CPU, memory
		// and slots, would pipeline this one beside them for the plugin to refuse.
		if ferr := p.fitBesidePipelines(node.Name, tr.Req); ferr != nil {
			refused = book.NoteOf(ferr)
			if v := klog.V(5); v.Enabled() {
				v.InfoS("vGPU fit beside the node's pipelined tasks failed", "task", klog.KRef(task.Namespace, task.Name),
					"node", node.Name, "detail", ferr.Detail())
			}
		}
	}
	switch {
	case why != "":
		tr.Refused.Add(book.PendingNoInventory)
		return unresolvable(task, node, PluginName+": "+why)
	case refused != nil:
		tr.Refused.Add(refused.Kind)
		if v := klog.V(5); v.Enabled() {
			// The card-by-card account is logged where the engine refuses (Ledger.Answer).
			v.InfoS("vGPU fit failed", "task", klog.KRef(task.Namespace, task.Name), "node", node.Name, "reason", refused.Reason)
		}
		// Preempt and reclaim try only nodes where evicting could help: enough cards
		// refuse for usage alone, and the tasks this one may evict hold them.
		code := vapi.UnschedulableAndUnresolvable
		if refused.Resolvable && (p.ssn == nil || p.evictionCouldHelp(task, node, tr)) {
			code = vapi.Unschedulable
		}
		return vapi.NewFitErrWithStatus(task, node, &vapi.Status{Code: code, Reason: refused.Reason})
	}
	return nil
}

// fitBesidePipelines fits the request on the node's booked cards with the session's
// pipelined tasks there in place.
func (p *vgpuPlugin) fitBesidePipelines(node string, req *placement.Request) *placement.FitError {
	n := p.ledger.Clone(node)
	if n == nil {
		return nil
	}
	p.pipelined.AccountOn(node, n)
	_, ferr := placement.FitPod(n, req)
	return ferr
}

func unresolvable(task *vapi.TaskInfo, node *vapi.NodeInfo, reason string) error {
	return vapi.NewFitErrWithStatus(task, node, &vapi.Status{Code: vapi.UnschedulableAndUnresolvable, Reason: reason})
}

// prePredicate runs when Volcano starts on a task again: the node preempt last tried
// it on (allocatable.go) is forgotten.
func (p *vgpuPlugin) prePredicate(task *vapi.TaskInfo) error {
	p.evictingOn.Delete(task.UID)
	return nil
}
