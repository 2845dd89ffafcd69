package vgpu

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// queueShares is one session's division of the cluster's card memory and compute
// among the queues that have vGPU tasks. Volcano's proportion plugin weighs queues
// by the resources it sees, and card memory and cores are not among them; this
// holds each queue's vGPU tasks to its weighted share of what actually runs out.
// Tasks without vGPU requests are never looked at.
type queueShares struct {
	mu    sync.RWMutex
	total fairshare.Amount
	// refMiB is the mean card memory, to cost a percentage request before its
	// card is chosen.
	refMiB int64
	order  []vapi.QueueID
	queues map[vapi.QueueID]*queueShare
	// charged is what each placed task counts for in its queue.
	charged map[vapi.TaskID]charge
	// evicted holds the charges of tasks evicted in this session, so that a
	// discarded eviction (preempt or reclaim rolling a statement back) restores
	// exactly what the task held.
	evicted map[vapi.TaskID]charge
}

type queueShare struct {
	name       string
	weight     int32
	capability fairshare.Amount
	// guarantee is the card memory and cores the queue deserves whatever its weight
	// (its Queue's spec.guarantee.resource), as far as it asks for them.
	guarantee fairshare.Amount
	request   fairshare.Amount
	allocated fairshare.Amount
	deserved  fairshare.Amount
	// minAsk is the cost of the queue's smallest pending vGPU task at session open
	// (zero when none is pending): a share smaller than it cannot be used.
	minAsk fairshare.Amount
}

// charge is a placed task's part of its queue: held is what it holds (exact once
// its cards are chosen), asked what it counted for in the request while pending.
type charge struct {
	queue       vapi.QueueID
	held, asked fairshare.Amount
}

func newQueueShares(total fairshare.Amount, refMiB int64) *queueShares {
	return &queueShares{total: total, refMiB: refMiB, queues: map[vapi.QueueID]*queueShare{},
		charged: map[vapi.TaskID]charge{}, evicted: map[vapi.TaskID]charge{}}
}

// buildShares reads every queue's vGPU demand and holdings and divides the cards.
func (p *vgpuPlugin) buildShares(ssn *framework.Session) *queueShares {
	s := newQueueShares(p.ledger.cardTotals())
	for _, job := range ssn.Jobs {
		q, ok := ssn.Queues[job.Queue]
		if !ok {
			continue
		}
		for _, task := range job.Tasks {
			if task.Pod == nil || !p.args.Resources.HasVGPURequest(task.Pod) {
				continue
			}
			switch {
			case vapi.AllocatedStatus(task.Status):
				cs, _, ok, err := p.heldCards(task)
				if !ok || err != nil {
					continue // the ledger logged it
				}
				held := fairshare.Assigned(cs)
				qs := s.queue(q, p.args)
				qs.allocated = qs.allocated.Add(held)
				qs.request = qs.request.Add(held)
				s.charged[task.UID] = charge{queue: q.UID, held: held, asked: held}
			case task.Status == vapi.Pending:
				tr := p.request(task)
				if tr == nil || tr.err != nil {
					continue
				}
				s.queue(q, p.args).ask(fairshare.Requested(tr.req.Containers, s.refMiB))
			}
		}
		// Members whose pods the job controller has not created yet ask as well.
		for _, tr := range p.unseen(job).vgpu {
			s.queue(q, p.args).ask(fairshare.Requested(tr.req.Containers, s.refMiB))
		}
	}
	s.divide()
	for _, id := range s.order {
		q := s.queues[id]
		klog.V(4).InfoS("vGPU queue share", "queue", q.name, "weight", q.weight, "deserved", q.deserved.String(),
			"allocated", q.allocated.String(), "request", q.request.String())
	}
	return s
}

func (s *queueShares) queue(q *vapi.QueueInfo, args pluginargs.Args) *queueShare {
	if qs, ok := s.queues[q.UID]; ok {
		return qs
	}
	qs := &queueShare{name: q.Name, weight: q.Weight, capability: fairshare.Unlimited}
	if q.Queue != nil {
		if v, ok := q.Queue.Spec.Capability[args.Resources.Memory]; ok {
			qs.capability.MemoryMiB = float64(v.Value())
		}
		if v, ok := q.Queue.Spec.Capability[args.Resources.Cores]; ok {
			qs.capability.Cores = float64(v.Value())
		}
		if v, ok := q.Queue.Spec.Guarantee.Resource[args.Resources.Memory]; ok {
			qs.guarantee.MemoryMiB = float64(v.Value())
		}
		if v, ok := q.Queue.Spec.Guarantee.Resource[args.Resources.Cores]; ok {
			qs.guarantee.Cores = float64(v.Value())
		}
	}
	s.queues[q.UID] = qs
	s.order = append(s.order, q.UID)
	sort.Slice(s.order, func(i, j int) bool { return s.order[i] < s.order[j] })
	return qs
}

// ask adds a pending task's cost to the queue's demand.
func (q *queueShare) ask(cost fairshare.Amount) {
	q.request = q.request.Add(cost)
	if q.minAsk == (fairshare.Amount{}) || fairshare.Smaller(cost, q.minAsk) {
		q.minAsk = cost
	}
}

// divide recomputes every queue's deserved share; callers hold mu or own s.
func (s *queueShares) divide() {
	claims := make([]fairshare.Claim, len(s.order))
	for i, id := range s.order {
		q := s.queues[id]
		claims[i] = fairshare.Claim{Weight: float64(q.weight), Request: q.request, Capability: q.capability, Guarantee: q.guarantee}
	}
	for i, d := range fairshare.Divide(s.total, claims) {
		s.queues[s.order[i]].deserved = d
	}
}

// admit reports whether the queue may place a task asking cost; otherwise why.
func (s *queueShares) admit(queue vapi.QueueID, cost fairshare.Amount) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok {
		return true, ""
	}
	after := q.allocated.Add(cost)
	if after.Within(q.deserved) {
		return true, ""
	}
	// A queue below its share may place one more task even if that takes it past:
	// its tasks may be larger than the rest of its share (max-min, to within a task).
	if after.Within(q.capability) && fairshare.Below(q.allocated, q.deserved, cost) {
		return true, ""
	}
	// Work-conserving: beyond its share a queue may use what no other queue holds or
	// may still claim (its tasks may be larger than its share, or the others ask for
	// less than theirs), never past its own capability.
	if after.Within(q.capability) && cost.Within(s.spare(queue)) {
		klog.V(4).InfoS("vGPU queue borrows beyond its share", "queue", q.name, "held", q.allocated.String(),
			"asked", cost.String(), "deserved", q.deserved.String())
		return true, ""
	}
	var weight int32
	for _, o := range s.queues {
		weight += o.weight
	}
	var over []string
	if cost.MemoryMiB > 0 && !(fairshare.Amount{MemoryMiB: after.MemoryMiB}).Within(fairshare.Amount{MemoryMiB: q.deserved.MemoryMiB}) {
		over = append(over, fmt.Sprintf("card memory %.0f MiB held + %.0f MiB asked > %.0f MiB deserved", q.allocated.MemoryMiB, cost.MemoryMiB, q.deserved.MemoryMiB))
	}
	if cost.Cores > 0 && !(fairshare.Amount{Cores: after.Cores}).Within(fairshare.Amount{Cores: q.deserved.Cores}) {
		over = append(over, fmt.Sprintf("cores %.0f held + %.0f asked > %.0f deserved", q.allocated.Cores, cost.Cores, q.deserved.Cores))
	}
	if len(over) == 0 {
		// Only a dimension the task does not ask for is over: nothing to hold it to.
		return true, ""
	}
	return false, fmt.Sprintf("vgpu: queue %s is at its share of the cluster's cards (weight %d of %d): %s",
		q.name, q.weight, weight, strings.Join(over, "; "))
}

// beyondCapability says why the cheapest need of costs can never be held by the
// queue within its capability for card memory or cores, or "" when they could.
func (s *queueShares) beyondCapability(queue vapi.QueueID, costs []fairshare.Amount, need int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok || need <= 0 || len(costs) == 0 {
		return ""
	}
	m, c := cheapest(costs, need)
	if m > q.capability.MemoryMiB {
		return fmt.Sprintf("queue %s's capability of %.0f MiB of card memory is less than the %.0f MiB its %d members need",
			q.name, q.capability.MemoryMiB, m, need)
	}
	if c > q.capability.Cores {
		return fmt.Sprintf("queue %s's capability of %.0f%% of card cores is less than the %.0f%% its %d members need",
			q.name, q.capability.Cores, c, need)
	}
	return ""
}

// entitled reports whether the cheapest need of costs fit in what the queue is owed:
// its deserved share less what it holds.
func (s *queueShares) entitled(queue vapi.QueueID, costs []fairshare.Amount, need int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok || need <= 0 || len(costs) == 0 {
		return false
	}
	m, c := cheapest(costs, need)
	return fairshare.Amount{MemoryMiB: m, Cores: c}.Within(q.deserved.Sub(q.allocated))
}

// cheapest sums, per dimension, the need smallest of costs.
func cheapest(costs []fairshare.Amount, need int) (memoryMiB, cores float64) {
	sum := func(of func(fairshare.Amount) float64) float64 {
		vs := make([]float64, len(costs))
		for i, c := range costs {
			vs[i] = of(c)
		}
		sort.Float64s(vs)
		total := 0.0
		for _, v := range vs[:min(need, len(vs))] {
			total += v
		}
		return total
	}
	return sum(func(a fairshare.Amount) float64 { return a.MemoryMiB }), sum(func(a fairshare.Amount) float64 { return a.Cores })
}

// spare is what queue could borrow beyond its share; callers hold mu.
func (s *queueShares) spare(queue vapi.QueueID) fairshare.Amount {
	hs := make([]fairshare.Holding, len(s.order))
	self := -1
	for i, id := range s.order {
		q := s.queues[id]
		hs[i] = fairshare.Holding{Allocated: q.allocated, Deserved: q.deserved, Request: q.request, MinAsk: q.minAsk}
		if id == queue {
			self = i
		}
	}
	return fairshare.Spare(s.total, hs, self)
}

// place charges a task to its queue; release takes the charge back.
func (s *queueShares) place(task vapi.TaskID, queue vapi.QueueID, held, asked fairshare.Amount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok {
		return
	}
	q.allocated = q.allocated.Add(held)
	q.request = q.request.Add(held).Sub(asked)
	s.charged[task] = charge{queue: queue, held: held, asked: asked}
	s.divide()
}

// release takes a task's charge back: a rolled-back placement returns to the
// queue's pending demand, an eviction leaves it (and is remembered for restore).
func (s *queueShares) release(task vapi.TaskID, evicted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.charged[task]
	if !ok {
		return
	}
	delete(s.charged, task)
	q := s.queues[c.queue]
	q.allocated = q.allocated.Sub(c.held)
	q.request = q.request.Sub(c.held)
	if evicted {
		s.evicted[task] = c
	} else {
		q.request = q.request.Add(c.asked)
	}
	s.divide()
}

// restore undoes release for an eviction that was discarded; false when the task
// was not evicted in this session.
func (s *queueShares) restore(task vapi.TaskID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.evicted[task]
	if !ok {
		return false
	}
	delete(s.evicted, task)
	q := s.queues[c.queue]
	q.allocated = q.allocated.Add(c.held)
	q.request = q.request.Add(c.held)
	s.charged[task] = c
	s.divide()
	return true
}

// allocatable holds a vGPU task to its queue's share, and, while Volcano's preempt
// tries it on a node, to that node's cards (cardsFreedFor). A refusal is written as the
// task's fit error, so the pod's condition and the PodGroup's event say why.
func (p *vgpuPlugin) allocatable(ssn *framework.Session, queue *vapi.QueueInfo, task *vapi.TaskInfo) bool {
	tr := p.request(task)
	if tr == nil || tr.err != nil {
		return true
	}
	if !p.cardsFreedFor(ssn, task, tr) {
		return false
	}
	if p.shares == nil {
		return true
	}
	ok, why := p.shares.admit(queue.UID, fairshare.Requested(tr.req.Containers, p.shares.refMiB))
	if ok {
		return true
	}
	tr.refused.add(pendingQueueShare)
	if job, found := ssn.Jobs[task.Job]; found {
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

// onPlaced and onUnplaced keep the queues' holdings in step with the session.
func (p *vgpuPlugin) onPlaced(ssn *framework.Session) func(*framework.Event) {
	return func(e *framework.Event) {
		task := e.Task
		tr := p.request(task)
		if tr == nil || tr.err != nil {
			return
		}
		if p.shares.restore(task.UID) {
			// A discarded eviction: the task holds what it held before.
			return
		}
		job, ok := ssn.Jobs[task.Job]
		if !ok {
			return
		}
		asked := fairshare.Requested(tr.req.Containers, p.shares.refMiB)
		held := asked
		if containers, booked := p.ledger.held(task.UID); booked {
			held = fairshare.Assigned(containers)
		}
		p.shares.place(task.UID, job.Queue, held, asked)
	}
}

func (p *vgpuPlugin) onUnplaced(e *framework.Event) {
	p.shares.release(e.Task.UID, e.Task.Status == vapi.Releasing)
}

// publish records every queue's share in base units: memory in bytes, cores in whole
// cards.
func (s *queueShares) publish(memory, cards *prometheus.GaugeVec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.queues {
		for kind, a := range map[string]fairshare.Amount{"deserved": q.deserved, "allocated": q.allocated, "request": q.request} {
			memory.WithLabelValues(q.name, kind).Set(a.MemoryMiB * mib)
			cards.WithLabelValues(q.name, kind).Set(a.Cores / 100)
		}
	}
}

// served is how much of its share a queue holds, in its most-served dimension
// (held ÷ deserved; +Inf for a queue holding cards it does not deserve).
func (q *queueShare) served() float64 {
	ratio := 0.0
	for _, d := range [][2]float64{{q.allocated.MemoryMiB, q.deserved.MemoryMiB}, {q.allocated.Cores, q.deserved.Cores}} {
		switch {
		case d[1] > 0:
			ratio = math.Max(ratio, d[0]/d[1])
		case d[0] > 0:
			return math.Inf(1)
		}
	}
	return ratio
}

// compare puts first the queue that holds the smallest part of its card share, for
// two queues of the same priority that both ask for vGPU resources; any other pair
// is left to the next plugin (proportion's order by CPU, memory and slots).
func (s *queueShares) compare(l, r *vapi.QueueInfo) int {
	if l.Queue == nil || r.Queue == nil || l.Queue.Spec.Priority != r.Queue.Spec.Priority {
		return 0
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	lq, rq := s.queues[l.UID], s.queues[r.UID]
	if lq == nil || rq == nil || lq.request == (fairshare.Amount{}) || rq.request == (fairshare.Amount{}) {
		return 0
	}
	switch ls, rs := lq.served(), rq.served(); {
	case ls < rs:
		return -1
	case ls > rs:
		return 1
	}
	return 0
}
