package vgpu

import (
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"

	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// jobEnqueueable keeps a gang out of the queue while the cluster's free vGPU
// capacity cannot hold its minimum members, or when its queue's capability for card
// memory or cores never could, and says why on the PodGroup: its device-plugin members
// against the device-plugin nodes' cards, its members with claims of Tessera's DRA
// class against the DRA nodes' cards (draenqueue.go).
func (p *vgpuPlugin) jobEnqueueable(obj interface{}) int {
	job, ok := obj.(*vapi.JobInfo)
	if !ok {
		return util.Abstain
	}
	if p.devicePluginGangEnqueueable(job) == util.Reject {
		return util.Reject
	}
	return p.claimGangEnqueueable(job)
}

// devicePluginGangEnqueueable is jobEnqueueable for the members that ask for
// volcano.sh/vgpu-* resources; members without count as placeable.
func (p *vgpuPlugin) devicePluginGangEnqueueable(job *vapi.JobInfo) int {
	reqs, others, err := p.pendingVGPU(job)
	if err != nil {
		p.refuseGang(job, PluginName+": "+err.Error())
		return util.Reject
	}
	// A VolcanoJob's pods are created only once it is enqueued: judge its members by
	// their templates until then.
	u := p.unseen(job)
	reqs, others = append(reqs, u.vgpu...), others+u.others
	if len(reqs) == 0 {
		return util.Abstain
	}
	need := int(job.MinAvailable) - int(job.ReadyTaskNum()) - int(job.WaitingTaskNum()) - others
	if need <= 0 {
		return util.Abstain
	}
	why := ""
	var cost []fairshare.Amount
	if p.shares != nil {
		cost = make([]fairshare.Amount, len(reqs))
		for i, tr := range reqs {
			cost[i] = p.shares.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly)
		}
		why = p.shares.BeyondCapability(job.Queue, cost, need)
	}
	if why == "" && p.cacheMissing > 0 {
		// The free and total cards are not known while the cache loads (cacheload.go).
		return util.Abstain
	}
	if why == "" {
		// jobValid says this of a job whose pods exist; a VolcanoJob has none yet.
		total, smallest := p.ledger.Total()
		if w := book.Exceeds(reqs, need, total, smallest, "in the whole cluster"); w != "" {
			why = "the gang can never fit: " + w
		}
	}
	if why == "" {
		free, smallest := p.ledger.Free()
		why = book.Exceeds(reqs, need, free, smallest, "free in the cluster")
		if why != "" && p.shares != nil && p.shares.Entitled(job.Queue, cost, need) {
			// The queue is owed the cards: reclaim takes them back from queues above
			// their share, but only for jobs that are in the queue.
			why = ""
		}
		if why != "" && p.outranks(job) {
			// Preempt may free cards for it inside its queue, again only once it is in.
			why = ""
		}
	}
	if why == "" {
		return util.Abstain
	}
	p.refuseGang(job, PluginName+": "+why)
	klog.V(3).InfoS("vGPU job not enqueued", "job", klog.KRef(job.Namespace, job.Name), "reason", why)
	return util.Reject
}

// outranks reports whether the job's queue runs vGPU pods of a lower priority than the
// job (the pod's or its job's), which preempt may evict for it.
func (p *vgpuPlugin) outranks(job *vapi.JobInfo) bool {
	lp := &p.lowest
	lp.once.Do(func() {
		lp.byQueue = map[vapi.QueueID]int32{}
		if p.ssn == nil {
			return
		}
		for _, j := range p.ssn.Jobs {
			for _, t := range j.TaskStatusIndex[vapi.Running] {
				if !t.Preemptable || p.request(t) == nil {
					continue
				}
				prio := min(t.Priority, j.Priority)
				if low, seen := lp.byQueue[j.Queue]; !seen || prio < low {
					lp.byQueue[j.Queue] = prio
				}
			}
		}
	})
	low, ok := lp.byQueue[job.Queue]
	return ok && low < job.Priority
}
