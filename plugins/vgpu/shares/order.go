package shares

import (
	"math"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Compare puts first the queue that holds the smallest part of its card share, for
// two queues of the same priority that both ask for vGPU resources; any other pair
// is left to the next plugin (proportion's order by CPU, memory and slots): 0.
func (s *Shares) Compare(l, r *vapi.QueueInfo) int {
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

// served is how much of its share a queue holds, in its most-served dimension
// (held ÷ deserved, MIG slices included; +Inf for a queue holding cards or instances
// it does not deserve).
func (q *queue) served() float64 {
	ratio := 0.0
	for _, d := range [][2]float64{{q.allocated.MemoryMiB, q.deserved.MemoryMiB}, {q.allocated.Cores, q.deserved.Cores},
		{q.allocated.MIGSlices, q.deserved.MIGSlices}} {
		switch {
		case d[1] > 0:
			ratio = math.Max(ratio, d[0]/d[1])
		case d[0] > 0:
			return math.Inf(1)
		}
	}
	return ratio
}
