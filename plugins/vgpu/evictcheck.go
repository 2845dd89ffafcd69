package vgpu

import (
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// The predicate's question for preempt and reclaim: could evicting on this node help
// the task? A refusal the answer is yes to is Unschedulable (Volcano may evict
// there); any other is UnschedulableAndUnresolvable.

// evictionCouldHelp reports whether Volcano should try to evict for this task on
// this node: the victims the plugin would choose among every task it may evict there
// make it fit, or it fits already once the pods being evicted there are gone and
// Volcano would pipeline it without evicting anything (pipelinesWithoutEviction: a
// gang's second member on the rest of a card its first member's victim freed).
// Preempt and reclaim ask it of every node for every pending task, so the card
// answer is remembered per node while the node's bookings, its evictable, releasing
// and pipelined tasks and the request's shape are unchanged (book's eviction memo).
// It matches the plugin's victim choice: where the plugin would offer no victims,
// Volcano would take them from a later tier, which knows nothing of cards.
func (p *vgpuPlugin) evictionCouldHelp(task *vapi.TaskInfo, node *vapi.NodeInfo, tr *book.TaskRequest) bool {
	jobs := p.ssn.Jobs
	nt := p.ledger.NodeTasks(node, jobs, func(t *vapi.TaskInfo) bool { return p.request(t) != nil })
	pipes := p.pipelined.Hash(node.Name)
	if len(nt.Running) == 0 && !nt.AnyReleasing && pipes == 0 {
		return false // the node's cards stay as they are: the predicate's refusal stands
	}
	tj := jobs[task.Job]
	queue := vapi.QueueID("")
	if tj != nil {
		queue = tj.Queue
	}
	// Name the question without building the candidate list: most answers are remembered.
	set, count := pipes*5^nt.Releasing, 0
	var memo victimJobMemo
	for _, r := range nt.Running {
		if r.Task.Job == task.Job {
			continue
		}
		if ready, ok := p.evictableReady(tj, task, r.Job, r.Task, &memo); ok {
			count++
			set ^= r.Hash + uint64(ready)*0x9e3779b97f4a7c15
		}
	}
	if count == 0 && !nt.AnyReleasing && pipes == 0 {
		return false
	}
	key := book.EvictKey{Request: tr.Shape, Queue: queue, Victims: set, Count: count}
	answer, ok, version := p.ledger.EvictAnswer(node.Name, key)
	if !ok {
		candidates := make([]*vapi.TaskInfo, 0, count)
		for _, r := range nt.Running {
			if r.Task.Job != task.Job && p.evictable(task, r.Task) {
				candidates = append(candidates, r.Task)
			}
		}
		victims, fitsAlready := p.pickVictims(task, tr, node, candidates)
		switch {
		case fitsAlready:
			answer = book.EvictNotNeeded
		case len(victims) > 0:
			answer = book.EvictHelps
		default:
			answer = book.EvictCannotHelp
		}
		p.ledger.RememberEvict(node.Name, key, version, answer)
	}
	switch answer {
	case book.EvictHelps:
		return true
	case book.EvictNotNeeded:
		// Not remembered: it depends on every plugin's victims, which change with
		// evictions anywhere in the cluster.
		return p.pipelinesWithoutEviction(task, node)
	}
	return false
}

// pipelinesWithoutEviction reports whether Volcano's preempt and reclaim would
// pipeline the task onto the node without evicting anything, given that its cards
// take the task once the pods being evicted there are gone. Reclaim evicts at least
// one of the victims some tier offers, so no tier may offer any (the plugin offers
// none for a task that fits: see victims); preempt evicts nothing once the node's CPU,
// memory and slots fit and the queue may allocate the task, else every victim offered.
// Volcano's own resources must fit the node's future idle for either to pipeline.
func (p *vgpuPlugin) pipelinesWithoutEviction(task *vapi.TaskInfo, node *vapi.NodeInfo) bool {
	ssn := p.ssn
	job := ssn.Jobs[task.Job]
	if job == nil || !task.InitResreq.LessEqual(node.FutureIdle(), vapi.Zero) {
		return false
	}
	var reclaimees, preemptees []*vapi.TaskInfo
	for _, t := range node.Tasks {
		if t.Status != vapi.Running || t.Job == task.Job {
			continue
		}
		j := ssn.Jobs[t.Job]
		switch {
		case j == nil:
		case j.Queue != job.Queue:
			if q := ssn.Queues[j.Queue]; q != nil && q.Reclaimable() && t.Preemptable {
				reclaimees = append(reclaimees, t)
			}
		default:
			preemptees = append(preemptees, t)
		}
	}
	if len(reclaimees) > 0 && len(ssn.Reclaimable(task, reclaimees)) > 0 {
		return false
	}
	if q := ssn.Queues[job.Queue]; len(preemptees) > 0 && (q == nil || !ssn.Allocatable(q, task)) &&
		len(ssn.Preemptable(task, preemptees)) > 0 {
		return false
	}
	return true
}
