package vgpu

import (
	"fmt"
	"sort"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// demand is a lower bound on what one task takes from the cluster's cards.
type demand struct {
	memoryMiB int64
	cores     int64
	slots     int64
}

// taskDemand bounds a request from below: percentage memory is priced at the
// smallest card, so a job refused on these figures can never fit.
func taskDemand(r *placement.Request, smallestMiB int64) demand {
	var d demand
	for _, c := range r.Containers {
		mem := c.MemoryMiB
		if mem == 0 {
			mem = max(1, smallestMiB*int64(c.MemoryPercent)/100)
		}
		d.memoryMiB += int64(c.Cards) * mem
		d.cores += int64(c.Cards * c.Cores)
		d.slots += int64(c.Cards)
	}
	return d
}

// pendingVGPU returns the job's pending tasks' requests; a malformed one ends the
// search with its reason.
func (p *vgpuPlugin) pendingVGPU(job *vapi.JobInfo) (reqs []*taskRequest, others int, err error) {
	for _, t := range job.TaskStatusIndex[vapi.Pending] {
		tr := p.request(t)
		switch {
		case tr == nil:
			others++
		case tr.err != nil:
			return nil, 0, fmt.Errorf("task %s: %w", t.Name, tr.err)
		default:
			reqs = append(reqs, tr)
		}
	}
	return reqs, others, nil
}

// jobEnqueueable keeps a gang out of the queue while the cluster's free vGPU
// capacity cannot hold its minimum members, or when its queue's capability for card
// memory or cores never could, and says why on the PodGroup.
func (p *vgpuPlugin) jobEnqueueable(obj interface{}) int {
	job, ok := obj.(*vapi.JobInfo)
	if !ok {
		return util.Abstain
	}
	reqs, others, err := p.pendingVGPU(job)
	if err != nil {
		p.refuseGang(job, "vgpu: "+err.Error())
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
		cost = costs(reqs, p.shares.refMiB)
		why = p.shares.beyondCapability(job.Queue, cost, need)
	}
	if why == "" && p.cacheMissing > 0 {
		// The free and total cards are not known while the cache loads (cacheload.go).
		return util.Abstain
	}
	if why == "" {
		// jobValid says this of a job whose pods exist; a VolcanoJob has none yet.
		total, smallest := p.ledger.total()
		if w := exceeds(reqs, need, total, smallest, "in the whole cluster"); w != "" {
			why = "the gang can never fit: " + w
		}
	}
	if why == "" {
		free, smallest := p.ledger.free()
		why = exceeds(reqs, need, free, smallest, "free in the cluster")
		if why != "" && p.shares != nil && p.shares.entitled(job.Queue, cost, need) {
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
	p.refuseGang(job, "vgpu: "+why)
	klog.V(3).InfoS("vGPU job not enqueued", "job", klog.KRef(job.Namespace, job.Name), "reason", why)
	return util.Reject
}

// outranks reports whether the job's queue runs vGPU pods of a lower priority than the
// job (the pod's or its job's), which preempt may evict for it.
func (p *vgpuPlugin) outranks(job *vapi.JobInfo) bool {
	p.lowestOnce.Do(func() {
		p.lowest = map[vapi.QueueID]int32{}
		if p.ssn == nil {
			return
		}
		for _, j := range p.ssn.Jobs {
			for _, t := range j.TaskStatusIndex[vapi.Running] {
				if !t.Preemptable || p.request(t) == nil {
					continue
				}
				prio := min(t.Priority, j.Priority)
				if low, seen := p.lowest[j.Queue]; !seen || prio < low {
					p.lowest[j.Queue] = prio
				}
			}
		}
	})
	low, ok := p.lowest[job.Queue]
	return ok && low < job.Priority
}

// costs are the requests' card costs for the queue shares.
func costs(reqs []*taskRequest, refMiB int64) []fairshare.Amount {
	out := make([]fairshare.Amount, len(reqs))
	for i, tr := range reqs {
		out[i] = fairshare.Requested(tr.req.Containers, refMiB)
	}
	return out
}

// exceeds reports why the cheapest need members of reqs cannot fit in capacity c,
// or "" when they might. Cheapest first: if even they exceed it, no choice of
// members fits.
func exceeds(reqs []*taskRequest, need int, c demand, smallestMiB int64, what string) string {
	ds := make([]demand, len(reqs))
	for i, tr := range reqs {
		r := tr.req
		ds[i] = taskDemand(r, smallestMiB)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].memoryMiB < ds[j].memoryMiB })
	var sum demand
	for _, d := range ds[:min(need, len(ds))] {
		sum.memoryMiB += d.memoryMiB
		sum.cores += d.cores
		sum.slots += d.slots
	}
	switch {
	case sum.slots > c.slots:
		return fmt.Sprintf("%d card shares needed by %d members, %d %s", sum.slots, need, c.slots, what)
	case sum.memoryMiB > c.memoryMiB:
		return fmt.Sprintf("%d MiB of card memory needed by %d members, %d MiB %s", sum.memoryMiB, need, c.memoryMiB, what)
	case sum.cores > c.cores:
		return fmt.Sprintf("%d%% of card cores needed by %d members, %d%% %s", sum.cores, need, c.cores, what)
	}
	return ""
}

// jobValid skips jobs that could not run even on an empty cluster: a malformed
// request, or members that no node's cards can ever hold.
func (p *vgpuPlugin) jobValid(obj interface{}) *vapi.ValidateResult {
	job, ok := obj.(*vapi.JobInfo)
	if !ok {
		return nil
	}
	reqs, others, err := p.pendingVGPU(job)
	if err != nil {
		return p.invalid(job, "InvalidVGPURequest", "vgpu: "+err.Error())
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
		if why, category := p.ledger.neverFits(tr.req); why != "" {
			tr.refused.add(category)
			if firstWhy == "" {
				firstWhy = why
			}
			continue
		}
		placeable++
	}
	if placeable < int(job.MinAvailable) {
		return p.invalid(job, "VGPURequestTooLarge", fmt.Sprintf("vgpu: %d of %d members can run in this cluster, %d required: %s",
			placeable, len(job.Tasks), job.MinAvailable, firstWhy))
	}
	need := int(job.MinAvailable) - held - others
	if need <= 0 {
		return nil
	}
	total, smallest := p.ledger.total()
	if why := exceeds(reqs, need, total, smallest, "in the whole cluster"); why != "" {
		return p.invalid(job, "VGPURequestTooLarge", "vgpu: the gang can never fit: "+why)
	}
	return nil
}

// invalid records the reason where the gang plugin reports it on the PodGroup:
// Volcano's allocate action drops a ValidateResult's message.
func (p *vgpuPlugin) invalid(job *vapi.JobInfo, reason, msg string) *vapi.ValidateResult {
	p.refuseGang(job, msg)
	klog.V(3).InfoS("vGPU job cannot run", "job", klog.KRef(job.Namespace, job.Name), "reason", msg)
	return &vapi.ValidateResult{Pass: false, Reason: reason, Message: msg}
}
