package vgpu

import (
	"fmt"
	"sort"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Card-aware eviction for Volcano's preempt and reclaim actions. Volcano evicts by
// CPU, memory and slots and stops as soon as those fit; for a vGPU task what must be
// freed is cards it can use. The plugin:
//   - lets a queue reclaim for a vGPU task only while the queue is below its card
//     share (Preemptive, which every tier must grant);
//   - tells the predicate whether evicting the tasks this one may evict on a node
//     could free cards for it, so that Volcano evicts nothing where it cannot help;
//   - offers as victims the fewest vGPU tasks whose cards, once freed, make the task
//     fit (Reclaimable, Preemptable), never a pod without vGPU requests. Volcano
//     takes the victims of the first tier whose plugins offer any, so this choice is
//     made where the plugin sits in the first tier (config/volcano-scheduler.conf).

// evictable is who may be evicted for a task: tasks of other queues above their card
// share (reclaim), or of the same queue at a lower priority (preempt), and in either
// case only members their job can spare (gangSpare).
func (p *vgpuPlugin) evictable(ssn *framework.Session, task, victim *vapi.TaskInfo) bool {
	_, ok := p.evictableReady(ssn, ssn.Jobs[task.Job], task, ssn.Jobs[victim.Job], victim, nil)
	return ok
}

// victimJobMemo keeps, for one walk over a node's tasks, the last victim job's ready
// members and its queue's standing: a node's tasks mostly belong to few jobs.
type victimJobMemo struct {
	job   *vapi.JobInfo
	ready int32
	// above is whether the job's queue may be reclaimed from (reclaimable, above its
	// card share).
	above bool
}

// evictableReady is evictable for an evictor of job tj and a victim of job vj, with
// vj's ready members (which name its state in the eviction memo). memo may be nil.
func (p *vgpuPlugin) evictableReady(ssn *framework.Session, tj *vapi.JobInfo, task *vapi.TaskInfo, vj *vapi.JobInfo, victim *vapi.TaskInfo,
	memo *victimJobMemo) (int32, bool) {
	if tj == nil || vj == nil || !victim.Preemptable {
		return 0, false
	}
	if memo == nil || memo.job != vj {
		m := victimJobMemo{job: vj, ready: vj.ReadyTaskNum()}
		if tj.Queue != vj.Queue {
			q := ssn.Queues[vj.Queue]
			m.above = q != nil && q.Reclaimable() && p.shares != nil && p.shares.aboveShare(vj.Queue)
		}
		if memo == nil {
			memo = &m
		} else {
			*memo = m
		}
	}
	ready := memo.ready
	if spareOf(vj, ready, tj.Queue != vj.Queue) <= 0 {
		return ready, false
	}
	if tj.Queue == vj.Queue {
		return ready, victim.Priority < task.Priority || vj.Priority < tj.Priority
	}
	return ready, memo.above
}

// gangSpare is how many of a job's running members may be evicted. Under reclaim
// Volcano's gang plugin keeps every job's minAvailable (a one-member job is never
// reclaimed); under preempt the shipped conf turns gang's check off, and the plugin
// keeps a gang's minimum itself while a one-member job may be preempted whole.
func gangSpare(job *vapi.JobInfo, reclaim bool) int32 {
	return spareOf(job, job.ReadyTaskNum(), reclaim)
}

func spareOf(job *vapi.JobInfo, ready int32, reclaim bool) int32 {
	if !reclaim && job.MinAvailable <= 1 {
		return ready
	}
	return ready - job.MinAvailable
}

// preemptive lets a queue reclaim cards for a vGPU task only while it is below its
// card share: past it, the task waits for free cards like any other.
func (p *vgpuPlugin) preemptive(queue *vapi.QueueInfo, task *vapi.TaskInfo) bool {
	tr := p.request(task)
	if tr == nil || tr.err != nil || p.shares == nil {
		return true
	}
	ok := p.shares.mayReclaim(queue.UID, fairshare.Requested(tr.req.Containers, p.shares.refMiB))
	if !ok {
		klog.V(3).InfoS("vGPU task may not reclaim: its queue is at its card share", "task", klog.KRef(task.Namespace, task.Name),
			"queue", queue.Name)
	}
	return ok
}

// evictionCouldHelp reports whether Volcano should try to evict for this task on
// this node: the victims the plugin would choose among every task it may evict there
// make it fit, or it fits already once the pods being evicted there are gone and
// Volcano would pipeline it without evicting anything (pipelinesWithoutEviction: a
// gang's second member on the rest of a card its first member's victim freed).
// Preempt and reclaim ask it of every node for every pending task, so the card
// answer is remembered per node while the node's bookings, its evictable, releasing
// and pipelined tasks and the request's shape are unchanged. It matches the plugin's
// victim choice: where the plugin would offer no victims, Volcano would take them
// from a later tier, which knows nothing of cards.
func (p *vgpuPlugin) evictionCouldHelp(ssn *framework.Session, task *vapi.TaskInfo, node *vapi.NodeInfo, tr *taskRequest) bool {
	nt := p.ledger.nodeTasks(node, ssn.Jobs, func(t *vapi.TaskInfo) bool { return p.request(t) != nil })
	pipes := p.pipelined.hash(node.Name)
	if len(nt.running) == 0 && !nt.anyReleasing && pipes == 0 {
		return false // the node's cards stay as they are: the predicate's refusal stands
	}
	tj := ssn.Jobs[task.Job]
	queue := vapi.QueueID("")
	if tj != nil {
		queue = tj.Queue
	}
	// Name the question without building the candidate list: most answers are remembered.
	set, count := pipes*5^nt.releasing, 0
	var memo victimJobMemo
	for _, r := range nt.running {
		if r.task.Job == task.Job {
			continue
		}
		if ready, ok := p.evictableReady(ssn, tj, task, r.job, r.task, &memo); ok {
			count++
			set ^= r.hash + uint64(ready)*0x9e3779b97f4a7c15
		}
	}
	if count == 0 && !nt.anyReleasing && pipes == 0 {
		return false
	}
	key := evictKey{request: tr.shape, queue: queue, victims: set, count: count}
	answer, ok, version := p.ledger.evictAnswer(node.Name, key)
	if !ok {
		candidates := make([]*vapi.TaskInfo, 0, count)
		for _, r := range nt.running {
			if r.task.Job != task.Job && p.evictable(ssn, task, r.task) {
				candidates = append(candidates, r.task)
			}
		}
		victims, fitsAlready := p.pickVictims(ssn, task, tr, node, candidates)
		switch {
		case fitsAlready:
			answer = evictNotNeeded
		case len(victims) > 0:
			answer = evictHelps
		default:
			answer = evictCannotHelp
		}
		p.ledger.rememberEvict(node.Name, key, version, answer)
	}
	switch answer {
	case evictHelps:
		return true
	case evictNotNeeded:
		// Not remembered: it depends on every plugin's victims, which change with
		// evictions anywhere in the cluster.
		return pipelinesWithoutEviction(ssn, task, node)
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
func pipelinesWithoutEviction(ssn *framework.Session, task *vapi.TaskInfo, node *vapi.NodeInfo) bool {
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

// uidHash spreads a task's UID over 64 bits; XOR over a set names the set.
func uidHash(uid vapi.TaskID) uint64 {
	// FNV-1a, inline: the predicate hashes every candidate of every node it is asked about.
	h := uint64(14695981039346656037)
	for i := 0; i < len(uid); i++ {
		h ^= uint64(uid[i])
		h *= 1099511628211
	}
	return h
}

// fitsWithout reports whether the request fits the node's future cards (those
// being released gone, pipelined tasks' in place) once the victims' cards are free.
func (p *vgpuPlugin) fitsWithout(future *placement.Node, req *placement.Request, victims []*vapi.TaskInfo) bool {
	n := future.Clone()
	for _, v := range victims {
		cs, qos, held, err := p.heldCards(v)
		if !held || err != nil {
			continue
		}
		n.Release(cs, qos)
	}
	_, ferr := placement.FitPod(n, req)
	return ferr == nil
}

// victims chooses, among the candidates Volcano offers on one node, the fewest vGPU
// tasks whose cards make the evictor fit (pickVictims). Tasks without vGPU requests
// are never offered for a vGPU evictor; other evictors are left to the other plugins.
func (p *vgpuPlugin) victims(ssn *framework.Session, evictor *vapi.TaskInfo, candidates []*vapi.TaskInfo) ([]*vapi.TaskInfo, int) {
	tr := p.request(evictor)
	if tr == nil || tr.err != nil || len(candidates) == 0 {
		return nil, util.Abstain
	}
	if p.cacheMissing > 0 {
		// Which queue is over its share, and what a node's cards hold, are not known
		// until the cache holds every bound vGPU pod (cacheload.go).
		klog.V(4).InfoS("No vGPU victims while the scheduler's cache is loading", "task", klog.KRef(evictor.Namespace, evictor.Name),
			"podsNotInCache", p.cacheMissing)
		return nil, util.Permit
	}
	node, ok := ssn.Nodes[candidates[0].NodeName]
	if !ok {
		return nil, util.Permit
	}
	p.evictingOn.Store(evictor.UID, node.Name)
	set, _ := p.pickVictims(ssn, evictor, tr, node, gangAdmitted(ssn, evictor, candidates))
	if len(set) == 0 {
		klog.V(4).InfoS("No vGPU victims on the node free cards for the task", "task", klog.KRef(evictor.Namespace, evictor.Name),
			"node", node.Name, "candidates", len(candidates))
	}
	return set, util.Permit
}

// cardsFreedFor is false while Volcano's preempt tries the task on a node whose cards
// will not take it even once the pods being evicted there are gone. Preempt evicts
// victims one by one until the session may allocate the task and its CPU, memory and
// slots fit the node, then pipelines it; asked nothing of cards, it would stop before
// evicting any (the CPU fits) and pipeline the task onto cards still held, for the
// plugin to refuse. The node is the one whose victims the plugin was last asked for
// (victims), forgotten when Volcano starts on the task again.
func (p *vgpuPlugin) cardsFreedFor(ssn *framework.Session, task *vapi.TaskInfo, tr *taskRequest) bool {
	v, ok := p.evictingOn.Load(task.UID)
	if !ok {
		return true
	}
	node, ok := ssn.Nodes[v.(string)]
	if !ok {
		return true
	}
	future := p.futureNode(node)
	if future == nil {
		return false
	}
	_, ferr := placement.FitPod(future, tr.req)
	if ferr != nil {
		klog.V(4).InfoS("vGPU task waits for evictions to free cards", "task", klog.KRef(task.Namespace, task.Name),
			"node", node.Name)
	}
	return ferr == nil
}

// gangAdmitted keeps, of the candidates Volcano offers for reclaim, those its gang
// plugin offers too: per job, the first members in the offered order beyond the
// job's minimum. Volcano intersects the victims of the plugins in a tier, so a
// victim gang would refuse must not be chosen. Preempt candidates pass unchanged.
func gangAdmitted(ssn *framework.Session, evictor *vapi.TaskInfo, candidates []*vapi.TaskInfo) []*vapi.TaskInfo {
	ej := ssn.Jobs[evictor.Job]
	if ej == nil {
		return candidates
	}
	left := map[vapi.JobID]int32{}
	var out []*vapi.TaskInfo
	for _, c := range candidates {
		job := ssn.Jobs[c.Job]
		if job == nil {
			continue
		}
		if job.Queue == ej.Queue {
			out = append(out, c)
			continue
		}
		if _, seen := left[job.UID]; !seen {
			left[job.UID] = gangSpare(job, true)
		}
		if left[job.UID] > 0 {
			left[job.UID]--
			out = append(out, c)
		}
	}
	return out
}

// pickVictims returns the fewest candidates whose cards, freed, make the evictor fit
// the node's future cards, smallest holdings first; none when no allowed set frees
// enough, or when it fits already (fitsAlready: once the pods being evicted there are
// gone, with the session's pipelined tasks in place). A gang keeps its minimum and a
// task never evicts its own gang's members.
func (p *vgpuPlugin) pickVictims(ssn *framework.Session, evictor *vapi.TaskInfo, tr *taskRequest, node *vapi.NodeInfo,
	candidates []*vapi.TaskInfo) (victims []*vapi.TaskInfo, fitsAlready bool) {
	future := p.futureNode(node)
	if future == nil {
		return nil, false
	}
	if _, ferr := placement.FitPod(future, tr.req); ferr == nil {
		return nil, true
	}
	type held struct {
		t    *vapi.TaskInfo
		cost fairshare.Amount
	}
	var useful []held
	for _, c := range candidates {
		if c.Status != vapi.Running || p.request(c) == nil || !p.evictable(ssn, evictor, c) || c.Job == evictor.Job {
			continue
		}
		cs, _, ok, err := p.heldCards(c)
		if !ok || err != nil {
			continue
		}
		useful = append(useful, held{c, fairshare.Assigned(cs)})
	}
	sort.Slice(useful, func(i, j int) bool {
		a, b := useful[i], useful[j]
		if fairshare.Smaller(a.cost, b.cost) || fairshare.Smaller(b.cost, a.cost) {
			return fairshare.Smaller(a.cost, b.cost)
		}
		return a.t.UID < b.t.UID // the same choice whatever order Volcano offers them in
	})
	// One victim if one is enough (least taken away), else the smallest prefix.
	for _, h := range useful {
		if p.fitsWithout(future, tr.req, []*vapi.TaskInfo{h.t}) {
			return []*vapi.TaskInfo{h.t}, false
		}
	}
	// Volcano evicts the victims one by one and stops as soon as CPU, memory and slots
	// fit (cards are not among them), then pipelines the task, which the plugin
	// refuses on cards that would not take it: the whole statement is rolled back. A
	// set of several victims therefore only helps when Volcano's own resources need
	// every one of them; where any one victim would satisfy them, offer none here, so
	// that the task is tried on nodes where one victim frees a card.
	idle := node.FutureIdle()
	for _, h := range useful {
		if evictor.InitResreq.LessEqual(idle.Clone().Add(h.t.Resreq), vapi.Zero) {
			return nil, false
		}
	}
	var set []*vapi.TaskInfo
	spare := map[vapi.JobID]int32{}
	reclaim := ssn.Jobs[evictor.Job] != nil
	for _, h := range useful {
		job := ssn.Jobs[h.t.Job]
		if _, seen := spare[job.UID]; !seen {
			spare[job.UID] = gangSpare(job, reclaim && ssn.Jobs[evictor.Job].Queue != job.Queue)
		}
		if spare[job.UID] <= 0 {
			continue // its gang has no more members above its minimum
		}
		spare[job.UID]--
		set = append(set, h.t)
		if p.fitsWithout(future, tr.req, set) {
			return set, false
		}
	}
	return nil, false
}

// aboveShare reports whether a queue holds more card memory or cores than it deserves.
func (s *queueShares) aboveShare(queue vapi.QueueID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	q, ok := s.queues[queue]
	return ok && !q.allocated.Within(q.deserved)
}

// mayReclaim reports whether a queue may take cards back for a task costing cost:
// while it stays within its share, or is below it (max-min to within a task).
func (s *queueShares) mayReclaim(queue vapi.QueueID, cost fairshare.Amount) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok {
		return true
	}
	return q.allocated.Add(cost).Within(q.deserved) || fairshare.Below(q.allocated, q.deserved, cost)
}

// onPipeline refuses to pipeline a vGPU task onto a node whose cards will not take it
// once the pods being evicted there are gone (Volcano pipelines when CPU, memory and
// slots fit, cards unseen); a refused pipeline is rolled back by Volcano. An accepted
// one keeps its cards in view for the other pipelines of the session.
func (p *vgpuPlugin) onPipeline(e *framework.Event) {
	task := e.Task
	tr := p.request(task)
	if tr == nil || p.ssn == nil {
		return
	}
	if tr.err != nil {
		e.Err = fmt.Errorf("%s: task %s has no valid vGPU request: %w", PluginName, klog.KRef(task.Namespace, task.Name), tr.err)
		return
	}
	node, ok := p.ssn.Nodes[task.NodeName]
	if !ok {
		e.Err = fmt.Errorf("%s: task %s pipelined to unknown node %s", PluginName, klog.KRef(task.Namespace, task.Name), task.NodeName)
		return
	}
	n := p.futureNode(node)
	if n == nil {
		e.Err = fmt.Errorf("%s: task %s pipelined to node %s, which has no usable vGPU inventory", PluginName,
			klog.KRef(task.Namespace, task.Name), task.NodeName)
		return
	}
	fit, ferr := placement.FitPod(n, tr.req)
	if ferr != nil {
		e.Err = fmt.Errorf("%s: task %s will not fit the cards of node %s even once its evicted pods are gone: %w", PluginName,
			klog.KRef(task.Namespace, task.Name), task.NodeName, ferr)
		klog.V(3).InfoS("Refusing to pipeline a vGPU task", "err", e.Err)
		p.metrics.pipelinesRefused.Inc()
		return
	}
	p.pipelined.add(task.UID, pipelinedFit{node: task.NodeName, containers: fit.Containers, qos: tr.req.Options.QoS})
}

func (p *vgpuPlugin) unpipeline(id vapi.TaskID) {
	p.pipelined.remove(id)
}

// futureNode is the node's cards once the pods being evicted from it are gone, less
// what the session's other pipelined tasks there expect.
func (p *vgpuPlugin) futureNode(node *vapi.NodeInfo) *placement.Node {
	n := p.ledger.clone(node.Name)
	if n == nil {
		return nil
	}
	for _, t := range node.Tasks {
		if t.Status != vapi.Releasing || p.request(t) == nil {
			continue
		}
		if cs, qos, held, err := p.heldCards(t); held && err == nil {
			n.Release(cs, qos)
		}
	}
	p.pipelined.each(node.Name, func(f pipelinedFit) { n.Account(f.containers, f.qos) })
	return n
}
