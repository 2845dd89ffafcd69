package vgpu

import (
	"sync"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// The queue share's hooks (with vgpu.QueueShare): the shares read at session open,
// the queue order, the preemptive check, and the events that keep the shares in
// step. The division itself is package shares'; Allocatable is allocatable.go's.

// buildShares reads every queue's vGPU demand and holdings and divides the cards.
func (p *vgpuPlugin) buildShares(ssn *framework.Session) *shares.Shares {
	total, refMiB := p.ledger.CardTotals()
	capacities := &cardCapacities{ledger: p.ledger}
	s := shares.New(total, fairshare.Cards{RefMiB: refMiB, WholeMiB: int64(float64(refMiB) * p.args.MemoryOversubscription),
		CapacityMiB: capacities.of, InstanceSlices: capacities.slices}, p.args.Resources)
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
				cs, tenancy, ok, err := p.holdings.Of(task)
				if !ok || err != nil {
					continue // the ledger logged it
				}
				s.Hold(q, task.UID, s.Charge(cs, tenancy.IdleOnly))
			case task.Status == vapi.Pending:
				tr := p.request(task)
				if tr == nil || tr.Err != nil {
					continue
				}
				s.Ask(q, s.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly))
			}
		}
		// Members whose pods the job controller has not created yet ask as well.
		for _, tr := range p.unseen(job).vgpu {
			s.Ask(q, s.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly))
		}
	}
	s.Divide()
	if v := klog.V(4); v.Enabled() {
		for _, q := range s.Standings() {
			v.InfoS("vGPU queue share", "queue", q.Name, "weight", q.Weight, "deserved", q.Deserved.String(),
				"allocated", q.Allocated.String(), "request", q.Requested.String())
		}
	}
	return s
}

// preemptive lets a queue reclaim cards for a vGPU task, or a task whose pod asks for
// cards through claims, only while it is below its card share: past it, the task
// waits for free cards like any other.
func (p *vgpuPlugin) preemptive(queue, task interface{}) bool {
	q, okq := queue.(*vapi.QueueInfo)
	t, okt := task.(*vapi.TaskInfo)
	if !okq || !okt {
		return true
	}
	if p.shares == nil {
		return true
	}
	var cost fairshare.Amount
	if tr := p.request(t); tr != nil && tr.Err == nil {
		cost = p.shares.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly)
	} else if c, isDRA := p.claimCost(t); isDRA && tr == nil {
		cost = c // what its claims ask (draclaims.go)
	} else {
		return true
	}
	ok := p.shares.MayReclaim(q.UID, cost)
	if !ok {
		klog.V(3).InfoS("vGPU task may not reclaim: its queue is at its card share", "task", klog.KRef(t.Namespace, t.Name),
			"queue", q.Name)
	}
	return ok
}

// queueOrder puts first, of two queues of the same priority that both ask for vGPU
// resources, the one holding the smaller part of its card share.
func (p *vgpuPlugin) queueOrder(l, r interface{}) int {
	lq, okl := l.(*vapi.QueueInfo)
	rq, okr := r.(*vapi.QueueInfo)
	if !okl || !okr {
		return 0
	}
	return p.shares.Compare(lq, rq)
}

// onPlaced and onUnplaced keep the queues' holdings in step with the session.
func (p *vgpuPlugin) onPlaced(e *framework.Event) {
	task := e.Task
	tr := p.request(task)
	if tr == nil || tr.Err != nil {
		return
	}
	if p.shares.Restore(task.UID) {
		// A discarded eviction: the task holds what it held before.
		return
	}
	job, ok := p.ssn.Jobs[task.Job]
	if !ok {
		return
	}
	idleOnly := tr.Req.Tenancy().IdleOnly
	asked := p.shares.Cost(tr.Req.Containers, idleOnly)
	held := asked
	if containers, booked := p.ledger.Held(task.UID); booked {
		held = p.shares.Charge(containers, idleOnly)
	}
	p.shares.Place(task.UID, job.Queue, held, asked)
}

func (p *vgpuPlugin) onUnplaced(e *framework.Event) {
	p.shares.Release(e.Task.UID, e.Task.Status == vapi.Releasing)
}

// cardCapacities is each card's schedulable memory by UUID, and each MIG instance's
// compute slices by its device UUID, read off the card book the first time a pod that
// holds its cards alone or a MIG instance is charged: most sessions have neither and
// skip the walk over every card. A card's capacity and layout do not change within a
// session.
type cardCapacities struct {
	ledger *book.Ledger
	once   sync.Once
	mib    map[string]int64
	// mig is each MIG instance's compute slices, by its device UUID ("MIG-...").
	mig map[string]float64
}

func (c *cardCapacities) read() {
	c.once.Do(func() {
		c.mib, c.mig = map[string]int64{}, map[string]float64{}
		c.ledger.EachCard(func(_ string, card *placement.CardState) {
			if !card.MIG {
				c.mib[card.UUID] = card.CapacityMiB
				return
			}
			for _, in := range card.MIGInstances {
				// The layout's profiles were checked when the node's annotation was
				// read (api.DecodeMIGInstances); one that still does not read
				// counts as unknown: one slice.
				if n, err := fairshare.MIGSlices(in.Profile); err == nil {
					c.mig[in.UUID] = n
				}
			}
		})
	})
}

// of is fairshare.Cards.CapacityMiB; safe from Volcano's parallel workers.
func (c *cardCapacities) of(uuid string) (int64, bool) {
	c.read()
	mib, ok := c.mib[uuid]
	return mib, ok
}

// slices is fairshare.Cards.InstanceSlices; safe from Volcano's parallel workers.
func (c *cardCapacities) slices(mig string) (float64, bool) {
	c.read()
	n, ok := c.mig[mig]
	return n, ok
}
