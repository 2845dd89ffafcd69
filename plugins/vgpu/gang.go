package vgpu

import (
	"fmt"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// jobValid skips jobs that could not run even on an empty cluster: a malformed
// request, or members that no node's cards can ever hold.
func (p *vgpuPlugin) jobValid(obj interface{}) *vapi.ValidateResult {
	job, ok := obj.(*vapi.JobInfo)
	if !ok {
		return nil
	}
	reqs, others, err := p.pendingVGPU(job)
	if err != nil {
		return p.invalid(job, "InvalidVGPURequest", PluginName+": "+err.Error())
	}
	if len(reqs) == 0 || p.cacheMissing > 0 {
		// While the cache loads, the session may lack the very nodes that fit.
		return nil
	}
	// Pipelined members are placed for this gang (on resources being released).
	held := int(job.ReadyTaskNum()) + int(job.WaitingTaskNum())
	placeable := held + others
	var firstWhy string
	for _, tr := range reqs {
		if why, category := p.ledger.NeverFits(tr.Req); why != "" {
			tr.Refused.Add(category)
			if firstWhy == "" {
				firstWhy = why
			}
			continue
		}
		placeable++
	}
	if placeable < int(job.MinAvailable) {
		return p.invalid(job, "VGPURequestTooLarge", fmt.Sprintf("%s: %d of %d members can run in this cluster, %d required: %s",
			PluginName, placeable, len(job.Tasks), job.MinAvailable, firstWhy))
	}
	need := int(job.MinAvailable) - held - others
	if need <= 0 {
		return nil
	}
	total, smallest := p.ledger.Total()
	if why := book.Exceeds(reqs, need, total, smallest, "in the whole cluster"); why != "" {
		return p.invalid(job, "VGPURequestTooLarge", PluginName+": the gang can never fit: "+why)
	}
	return nil
}

// pendingVGPU returns the job's pending tasks' requests; a malformed one ends the
// search with its reason.
func (p *vgpuPlugin) pendingVGPU(job *vapi.JobInfo) (reqs []*book.TaskRequest, others int, err error) {
	for _, t := range job.TaskStatusIndex[vapi.Pending] {
		tr := p.request(t)
		switch {
		case tr == nil:
			others++
		case tr.Err != nil:
			return nil, 0, fmt.Errorf("task %s: %w", t.Name, tr.Err)
		default:
			reqs = append(reqs, tr)
		}
	}
	return reqs, others, nil
}

// invalid records the reason where the gang plugin reports it on the PodGroup:
// Volcano's allocate action drops a ValidateResult's message.
func (p *vgpuPlugin) invalid(job *vapi.JobInfo, reason, msg string) *vapi.ValidateResult {
	p.refuseGang(job, msg)
	klog.V(3).InfoS("vGPU job cannot run", "job", klog.KRef(job.Namespace, job.Name), "reason", msg)
	return &vapi.ValidateResult{Pass: false, Reason: reason, Message: msg}
}

// refuseGang reports why the plugin keeps a job's gang back (on the PodGroup, where
// the gang plugin shows it) and remembers the refusal for the pending metric and
// for jobs without pods (reportPodless).
func (p *vgpuPlugin) refuseGang(job *vapi.JobInfo, msg string) {
	job.JobFitErrors = msg
	p.gangsRefused.Store(job.UID, true)
}

// refusedGang reports whether the plugin kept the job's gang back this session.
func (p *vgpuPlugin) refusedGang(job vapi.JobID) bool {
	_, ok := p.gangsRefused.Load(job)
	return ok
}
