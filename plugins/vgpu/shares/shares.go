// Package shares divides one session's card memory and compute among the queues that
// have vGPU tasks, and holds each queue to its part. Volcano's proportion plugin
// weighs queues by the resources it sees, and card memory and cores are not among
// them; this does for them what proportion does for the rest (weighted max-min
// fairness, placement/fairshare), from what the plugin tells it: the cards' supply,
// what each queue's placed tasks hold and its pending tasks ask. It is plain Go over
// Tessera's types and Volcano's ID and Info types, never the session object.
//
// Files:
//
//	shares.go   Shares: the queues' standing, built at session open, and the division
//	admit.go    who may place, borrow, reclaim or be reclaimed from, and gangs beyond a queue's reach
//	changes.go  placements, evictions and their rollbacks within the session
//	order.go    which of two queues goes first
//	claims.go   tasks whose pods use ResourceClaims of Tessera's DRA driver: their charges and costs
package shares

import (
	"sort"
	"sync"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Shares is one session's division of the cluster's card memory and compute among
// the queues with vGPU tasks. Tasks without vGPU requests are never looked at.
type Shares struct {
	// mu guards every field below but total, cards and names, which are fixed by
	// New: the allocatable and predicate hooks ask on Volcano's parallel workers.
	mu    sync.RWMutex
	total fairshare.Amount
	// cards is what the shares know of the cards, to cost a request before its cards
	// are chosen and to charge a pod that holds its cards alone the whole of each.
	cards fairshare.Cards
	// names are the resources whose capability and guarantee bound a queue.
	names  api.ResourceNames
	order  []vapi.QueueID
	queues map[vapi.QueueID]*queue
	// charged is what each placed task counts for in its queue.
	charged map[vapi.TaskID]charge
	// evicted holds the charges of tasks evicted in this session, so that a
	// discarded eviction (preempt or reclaim rolling a statement back) restores
	// exactly what the task held.
	evicted map[vapi.TaskID]charge
	// claims is what each task whose pod uses claims of Tessera's DRA driver counts for
	// (claims.go): what its allocated claims hold, or its pending claims ask.
	claims map[vapi.TaskID]fairshare.Amount
	// claimSupply is the part of total on DRA nodes (claims.go).
	claimSupply fairshare.Amount
}

// queue is one queue's standing.
type queue struct {
	name       string
	weight     int32
	capability fairshare.Amount
	// guarantee is the card memory and cores the queue deserves whatever its weight
	// (its Queue's spec.guarantee.resource), as far as it asks for them.
	guarantee fairshare.Amount
	request   fairshare.Amount
	allocated fairshare.Amount
	deserved  fairshare.Amount
	// minAsk is the cost of the queue's smallest pending vGPU task that asks for card
	// memory or cores at session open (zero when none is pending): a share smaller
	// than it cannot be used. minMIGAsk is the same of its pending MIG tasks.
	minAsk, minMIGAsk fairshare.Amount
	// claimRequest is the part of request that DRA tasks hold and ask (claims.go).
	claimRequest fairshare.Amount
}

// charge is a placed task's part of its queue: held is what it holds (exact once
// its cards are chosen), asked what it counted for in the request while pending.
type charge struct {
	queue       vapi.QueueID
	held, asked fairshare.Amount
}

// New returns shares of total, the schedulable card memory and cores, without
// queues; cards are the cards' sizes that tasks are charged by. Queues enter as Hold
// and Ask name them; Divide then computes what each deserves.
func New(total fairshare.Amount, cards fairshare.Cards, names api.ResourceNames) *Shares {
	return &Shares{total: total, cards: cards, names: names, queues: map[vapi.QueueID]*queue{},
		charged: map[vapi.TaskID]charge{}, evicted: map[vapi.TaskID]charge{}, claims: map[vapi.TaskID]fairshare.Amount{}}
}

// Cost is what a request counts for in its queue before its cards are chosen (a
// percentage of memory costed on a card of the mean size; a pod that asks for idle
// cards only (idleOnly, placement.Request.Tenancy), a whole card of the mean size per
// card).
func (s *Shares) Cost(containers []api.ContainerRequest, idleOnly bool) fairshare.Amount {
	return s.cards.Requested(containers, idleOnly)
}

// Charge is what a placed task's cards count for in its queue: what it was assigned,
// or each card whole when it holds them alone (idleOnly, placement.Tenancy).
func (s *Shares) Charge(cs []api.ContainerAssignment, idleOnly bool) fairshare.Amount {
	return s.cards.Assigned(cs, idleOnly)
}

// Hold charges a placed task's holding to queue q, at session open.
func (s *Shares) Hold(q *vapi.QueueInfo, task vapi.TaskID, held fairshare.Amount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	qs := s.queue(q)
	qs.allocated = qs.allocated.Add(held)
	qs.request = qs.request.Add(held)
	s.charged[task] = charge{queue: q.UID, held: held, asked: held}
}

// Ask adds a pending task's cost to queue q's demand, at session open.
func (s *Shares) Ask(q *vapi.QueueInfo, cost fairshare.Amount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	qs := s.queue(q)
	qs.request = qs.request.Add(cost)
	if cost.MIGSlices > 0 && (qs.minMIGAsk == (fairshare.Amount{}) || fairshare.Smaller(cost, qs.minMIGAsk)) {
		qs.minMIGAsk = cost
	}
	if cost.MIGSlices > 0 && cost.MemoryMiB == 0 && cost.Cores == 0 {
		return // asks for no card memory or cores: no card task
	}
	if qs.minAsk == (fairshare.Amount{}) || fairshare.Smaller(cost, qs.minAsk) {
		qs.minAsk = cost
	}
}

// queue returns q's standing, reading its capability and guarantee the first time;
// the caller holds mu.
func (s *Shares) queue(q *vapi.QueueInfo) *queue {
	if qs, ok := s.queues[q.UID]; ok {
		return qs
	}
	qs := &queue{name: q.Name, weight: q.Weight, capability: fairshare.Unlimited}
	if q.Queue != nil {
		if v, ok := q.Queue.Spec.Capability[s.names.Memory]; ok {
			qs.capability.MemoryMiB = float64(v.Value())
		}
		if v, ok := q.Queue.Spec.Capability[s.names.Cores]; ok {
			qs.capability.Cores = float64(v.Value())
		}
		if v, ok := q.Queue.Spec.Guarantee.Resource[s.names.Memory]; ok {
			qs.guarantee.MemoryMiB = float64(v.Value())
		}
		if v, ok := q.Queue.Spec.Guarantee.Resource[s.names.Cores]; ok {
			qs.guarantee.Cores = float64(v.Value())
		}
	}
	s.queues[q.UID] = qs
	s.order = append(s.order, q.UID)
	sort.Slice(s.order, func(i, j int) bool { return s.order[i] < s.order[j] })
	return qs
}

// Divide computes every queue's deserved share, once the session's holdings and
// demand are in.
func (s *Shares) Divide() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.divide()
}

// divide recomputes every queue's deserved share; the caller holds mu.
func (s *Shares) divide() {
	claims := make([]fairshare.Claim, len(s.order))
	for i, id := range s.order {
		q := s.queues[id]
		claims[i] = fairshare.Claim{Weight: float64(q.weight), Request: s.reachable(q), Capability: q.capability, Guarantee: q.guarantee}
	}
	for i, d := range fairshare.Divide(s.total, claims) {
		s.queues[s.order[i]].deserved = d
	}
}

// reachable is the part of a queue's demand its tasks can reach (claims.go says why): its device-plugin
// demand up to the supply outside DRA nodes, plus its claims' demand up to the DRA
// nodes' supply; the caller holds mu.
func (s *Shares) reachable(q *queue) fairshare.Amount {
	capped := func(want, supply float64) float64 { return max(0, min(want, supply)) }
	dp, other := q.request.Sub(q.claimRequest), s.total.Sub(s.claimSupply)
	return fairshare.Amount{
		MemoryMiB: capped(dp.MemoryMiB, other.MemoryMiB) + capped(q.claimRequest.MemoryMiB, s.claimSupply.MemoryMiB),
		Cores:     capped(dp.Cores, other.Cores) + capped(q.claimRequest.Cores, s.claimSupply.Cores),
		MIGSlices: capped(q.request.MIGSlices, s.total.MIGSlices), // claims never ask for MIG instances
	}
}

// ClaimCost is what a task whose pod uses Tessera's DRA claims counts for; false for
// every other task (device-plugin vGPU tasks, CPU tasks, pods with other drivers'
// claims only).
func (s *Shares) ClaimCost(task vapi.TaskID) (fairshare.Amount, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.claims[task]
	return c, ok
}

// Standing is a queue's part of the cards as the session stands.
type Standing struct {
	Queue                          vapi.QueueID
	Name                           string
	Weight                         int32
	Deserved, Allocated, Requested fairshare.Amount
}

// Standings are every queue's, in the order of their IDs: for logs and metrics.
func (s *Shares) Standings() []Standing {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Standing, len(s.order))
	for i, id := range s.order {
		q := s.queues[id]
		out[i] = Standing{Queue: id, Name: q.name, Weight: q.weight, Deserved: q.deserved, Allocated: q.allocated, Requested: q.request}
	}
	return out
}
