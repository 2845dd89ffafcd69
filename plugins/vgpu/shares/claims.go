package shares

import (
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Tasks whose pods use ResourceClaims of Tessera's DRA driver share the queues' ledger
// with device-plugin tasks: a placed one is charged what its allocated claims hold, a
// pending one asks what its claims request, and Admit holds it to its queue's share
// like any vGPU task. The adapter reads the claims; this only remembers each task's
// amount, so that the hooks asked about the task later find it.

//
// DRA tasks reach only the cards of DRA nodes, and device-plugin tasks only the others:
// a queue's demand counts, in each dimension, at most the supply of each kind it asks
// for (reachable). Otherwise a queue whose claims ask more than the DRA nodes hold would
// be owed device-plugin cards it can never use, and keep another queue off them.

// SetClaimSupply says which part of the total supply is on DRA nodes; before Divide.
func (s *Shares) SetClaimSupply(supply fairshare.Amount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimSupply = supply
}

// HoldClaims charges a placed task's claims to queue q, at session open.
func (s *Shares) HoldClaims(q *vapi.QueueInfo, task vapi.TaskID, held fairshare.Amount) {
	s.Hold(q, task, held)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims[task] = held
	qs := s.queues[q.UID]
	qs.claimRequest = qs.claimRequest.Add(held)
}

// AskClaims adds a pending task's claim cost to queue q's demand, at session open.
func (s *Shares) AskClaims(q *vapi.QueueInfo, task vapi.TaskID, cost fairshare.Amount) {
	s.Ask(q, cost)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims[task] = cost
	qs := s.queues[q.UID]
	qs.claimRequest = qs.claimRequest.Add(cost)
}
