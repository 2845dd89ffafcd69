package vgpu

import (
	"sort"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

// Card-aware eviction for Volcano's preempt and reclaim actions. Volcano evicts by
// CPU, memory and slots and stops as soon as those fit; for a vGPU task what must be
// freed is cards it can use. The plugin:
//   - lets a queue reclaim for a vGPU task only while the queue is below its card
//     share (Preemptive, which every tier must grant: queues.go);
//   - tells the predicate whether evicting the tasks this one may evict on a node
//     could free cards for it, so that Volcano evicts nothing where it cannot help
//     (evictcheck.go);
//   - offers as victims the fewest vGPU tasks whose cards, once freed, make the task
//     fit (Reclaimable, Preemptable: victims in dravictims_session.go, which asks
//     pickVictims here), never a pod without vGPU requests; for a task whose pod asks
//     for cards through ResourceClaims, the fewest pods whose claims free cards on a
//     DRA node (dravictims.go), never a device-plugin pod, and never a DRA pod for a
//     device-plugin task (neither can use the other's cards).
//     Volcano takes the victims of the first tier whose plugins offer any, so this
//     choice is made where the plugin sits in the first tier
//     (config/volcano-scheduler.conf).

// pickVictims returns the fewest candidates whose cards, freed, make the evictor fit
// the node's future cards, smallest holdings first; none when no allowed set frees
// enough, or when it fits already (fitsAlready: once the pods being evicted there are
// gone, with the session's pipelined tasks in place). A gang keeps its minimum and a
// task never evicts its own gang's members.
func (p *vgpuPlugin) pickVictims(evictor *vapi.TaskInfo, tr *book.TaskRequest, node *vapi.NodeInfo,
	candidates []*vapi.TaskInfo) (victims []*vapi.TaskInfo, fitsAlready bool) {
	future := p.futureNode(node)
	if future == nil {
		return nil, false
	}
	if _, ferr := placement.FitPod(future, tr.Req); ferr == nil {
		return nil, true
	}
	type held struct {
		t    *vapi.TaskInfo
		cost fairshare.Amount
	}
	var useful []held
	for _, c := range candidates {
		if c.Status != vapi.Running || p.request(c) == nil || !p.evictable(evictor, c) || c.Job == evictor.Job {
			continue
		}
		cs, tenancy, ok, err := p.holdings.Of(c)
		if !ok || err != nil {
			continue
		}
		useful = append(useful, held{c, p.charge(cs, tenancy)})
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
		if p.fitsWithout(future, tr.Req, []*vapi.TaskInfo{h.t}) {
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
	jobs := p.ssn.Jobs
	var set []*vapi.TaskInfo
	spare := map[vapi.JobID]int32{}
	reclaim := jobs[evictor.Job] != nil
	for _, h := range useful {
		job := jobs[h.t.Job]
		if _, seen := spare[job.UID]; !seen {
			spare[job.UID] = gangSpare(job, reclaim && jobs[evictor.Job].Queue != job.Queue)
		}
		if spare[job.UID] <= 0 {
			continue // its gang has no more members above its minimum
		}
		spare[job.UID]--
		set = append(set, h.t)
		if p.fitsWithout(future, tr.Req, set) {
			return set, false
		}
	}
	return nil, false
}

// charge is what a victim's cards count for, what evicting it gives back to the
// queues: an idle-only pod's cards whole (fairshare.Cards.Assigned), so that a pod that
// asked for 1 MiB and holds a card alone is not taken for the smallest victim. Without
// the queue share, cards are not sized: such a pod counts 100 cores per card.
func (p *vgpuPlugin) charge(cs []api.ContainerAssignment, tenancy placement.Tenancy) fairshare.Amount {
	if p.shares != nil {
		return p.shares.Charge(cs, tenancy.IdleOnly)
	}
	return fairshare.Cards{}.Assigned(cs, tenancy.IdleOnly)
}

// fitsWithout reports whether the request fits the node's future cards (those
// being released gone, pipelined tasks' in place) once the victims' cards are free.
func (p *vgpuPlugin) fitsWithout(future *placement.Node, req *placement.Request, victims []*vapi.TaskInfo) bool {
	n := future.Clone()
	for _, v := range victims {
		cs, tenancy, held, err := p.holdings.Of(v)
		if !held || err != nil {
			continue
		}
		n.Release(cs, tenancy)
	}
	_, ferr := placement.FitPod(n, req)
	return ferr == nil
}

// futureNode is the node's cards once the pods being evicted from it are gone, with
// what the session's pipelined tasks there expect in place; nil without usable cards.
func (p *vgpuPlugin) futureNode(node *vapi.NodeInfo) *placement.Node {
	n := p.ledger.Clone(node.Name)
	if n == nil {
		return nil
	}
	for _, t := range node.Tasks {
		if t.Status != vapi.Releasing || p.request(t) == nil {
			continue
		}
		if cs, tenancy, held, err := p.holdings.Of(t); held && err == nil {
			n.Release(cs, tenancy)
		}
	}
	p.pipelined.AccountOn(node.Name, n)
	return n
}

// gangAdmitted keeps, of the candidates Volcano offers for reclaim, those its gang
// plugin offers too: per job, the first members in the offered order beyond the
// job's minimum. Volcano intersects the victims of the plugins in a tier, so a
// victim gang would refuse must not be chosen. Preempt candidates pass unchanged.
func gangAdmitted(jobs map[vapi.JobID]*vapi.JobInfo, evictor *vapi.TaskInfo, candidates []*vapi.TaskInfo) []*vapi.TaskInfo {
	ej := jobs[evictor.Job]
	if ej == nil {
		return candidates
	}
	left := map[vapi.JobID]int32{}
	var out []*vapi.TaskInfo
	for _, c := range candidates {
		job := jobs[c.Job]
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

// evictable is who may be evicted for a task: tasks of other queues above their card
// share (reclaim), or of the same queue at a lower priority (preempt), and in either
// case only members their job can spare (gangSpare).
func (p *vgpuPlugin) evictable(task, victim *vapi.TaskInfo) bool {
	_, ok := p.evictableReady(p.ssn.Jobs[task.Job], task, p.ssn.Jobs[victim.Job], victim, nil)
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
func (p *vgpuPlugin) evictableReady(tj *vapi.JobInfo, task *vapi.TaskInfo, vj *vapi.JobInfo, victim *vapi.TaskInfo,
	memo *victimJobMemo) (int32, bool) {
	if tj == nil || vj == nil || !victim.Preemptable {
		return 0, false
	}
	if memo == nil || memo.job != vj {
		m := victimJobMemo{job: vj, ready: vj.ReadyTaskNum()}
		if tj.Queue != vj.Queue {
			q := p.ssn.Queues[vj.Queue]
			m.above = q != nil && q.Reclaimable() && p.shares != nil && p.shares.AboveShareFor(vj.Queue, p.evictorCost(task))
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

// evictorCost is what an evicting task asks of the queue shares, so that reclaim takes
// from queues above their share in a dimension the task asks for (MIG slices for a MIG
// task, card memory and cores for a card task: shares.AboveShareFor); zero for a task
// whose request the plugin does not read (a DRA task: card memory and cores).
func (p *vgpuPlugin) evictorCost(task *vapi.TaskInfo) fairshare.Amount {
	if tr := p.request(task); tr != nil && tr.Err == nil && p.shares != nil {
		return p.shares.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly)
	}
	return fairshare.Amount{}
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
