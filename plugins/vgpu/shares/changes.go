package shares

import (
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// The session's changes: every placement and eviction moves a queue's holdings and
// demand, and the division is recomputed.

// Place charges a task to its queue: held is what its cards hold, asked what it
// counted for in the queue's demand while pending.
func (s *Shares) Place(task vapi.TaskID, queue vapi.QueueID, held, asked fairshare.Amount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok {
		return
	}
	q.allocated = q.allocated.Add(held)
	q.request = q.request.Add(held).Sub(asked)
	if _, claim := s.claims[task]; claim {
		q.claimRequest = q.claimRequest.Add(held).Sub(asked)
	}
	s.charged[task] = charge{queue: queue, held: held, asked: asked}
	s.divide()
}

// Release takes a task's charge back: a rolled-back placement returns to the
// queue's pending demand, an eviction leaves it (and is remembered for Restore).
func (s *Shares) Release(task vapi.TaskID, evicted bool) {
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
	_, claim := s.claims[task]
	if claim {
		q.claimRequest = q.claimRequest.Sub(c.held)
	}
	if evicted {
		s.evicted[task] = c
	} else {
		q.request = q.request.Add(c.asked)
		if claim {
			q.claimRequest = q.claimRequest.Add(c.asked)
		}
	}
	s.divide()
}

// Restore undoes Release for an eviction that was discarded; false when the task
// was not evicted in this session.
func (s *Shares) Restore(task vapi.TaskID) bool {
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
	if _, claim := s.claims[task]; claim {
		q.claimRequest = q.claimRequest.Add(c.held)
	}
	s.charged[task] = c
	s.divide()
	return true
}
