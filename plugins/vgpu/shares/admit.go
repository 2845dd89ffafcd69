package shares

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Admit reports whether the queue may place a task costing cost; otherwise why.
func (s *Shares) Admit(queue vapi.QueueID, cost fairshare.Amount) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok {
		return true, ""
	}
	after := q.allocated.Add(cost)
	if after.Within(fairshare.OpenUnasked(q.deserved, cost)) {
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
	// With no MIG card taking pods (none, or every one cordoned or being re-partitioned)
	// there is no MIG share to hold a pod to: it waits for the instances themselves,
	// with the predicate's reasons.
	if cost.MIGSlices > 0 && s.total.MIGSlices > 0 && !after.MIG().Within(q.deserved.MIG()) {
		over = append(over, fmt.Sprintf("MIG slices %.0f held + %.0f asked > %s deserved", q.allocated.MIGSlices, cost.MIGSlices, slices(q.deserved.MIGSlices)))
	}
	if len(over) == 0 {
		// Only a dimension the task does not ask for is over: nothing to hold it to.
		return true, ""
	}
	return false, fmt.Sprintf("%s: queue %s is at its share of the cluster's cards (weight %d of %d): %s",
		pluginargs.Plugin, q.name, q.weight, weight, strings.Join(over, "; "))
}

// spare is what queue could borrow beyond its share; the caller holds mu.
func (s *Shares) spare(queue vapi.QueueID) fairshare.Amount {
	hs := make([]fairshare.Holding, len(s.order))
	self := -1
	for i, id := range s.order {
		q := s.queues[id]
		hs[i] = fairshare.Holding{Allocated: q.allocated, Deserved: q.deserved, Request: s.reachable(q), MinAsk: q.minAsk,
			MinMIGAsk: q.minMIGAsk}
		if id == queue {
			self = i
		}
	}
	return fairshare.Spare(s.total, hs, self)
}

// AboveShare reports whether a queue holds more card memory or cores than it
// deserves: reclaim may take from it for a task that asks for cards.
func (s *Shares) AboveShare(queue vapi.QueueID) bool {
	return s.AboveShareFor(queue, fairshare.Amount{})
}

// AboveShareFor reports whether a queue holds more than it deserves in a dimension
// that a task costing cost asks for (fairshare.OpenUnasked): reclaim may take from it
// for that task. A queue above its MIG share is no victim for a card task, nor a queue
// above its card share for a MIG task.
func (s *Shares) AboveShareFor(queue vapi.QueueID, cost fairshare.Amount) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	q, ok := s.queues[queue]
	return ok && !q.allocated.Within(fairshare.OpenUnasked(q.deserved, cost))
}

// MayReclaim reports whether a queue may take cards back for a task costing cost:
// while it stays within its share, or is below it (max-min to within a task).
func (s *Shares) MayReclaim(queue vapi.QueueID, cost fairshare.Amount) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok {
		return true
	}
	return q.allocated.Add(cost).Within(fairshare.OpenUnasked(q.deserved, cost)) || fairshare.Below(q.allocated, q.deserved, cost)
}

// BeyondCapability says why the cheapest need of costs can never be held by the
// queue within its capability for card memory or cores, or "" when they could.
func (s *Shares) BeyondCapability(queue vapi.QueueID, costs []fairshare.Amount, need int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok || need <= 0 || len(costs) == 0 {
		return ""
	}
	sum := Cheapest(costs, need)
	m, c := sum.MemoryMiB, sum.Cores
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

// Entitled reports whether the cheapest need of costs fit in what the queue is owed:
// its deserved share less what it holds.
func (s *Shares) Entitled(queue vapi.QueueID, costs []fairshare.Amount, need int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.queues[queue]
	if !ok || need <= 0 || len(costs) == 0 {
		return false
	}
	sum := Cheapest(costs, need)
	return sum.Within(fairshare.OpenUnasked(q.deserved.Sub(q.allocated), sum))
}

// Cheapest sums, per dimension, the need smallest of costs: if even they exceed a
// capacity, no choice of need of them fits it.
func Cheapest(costs []fairshare.Amount, need int) fairshare.Amount {
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
	return fairshare.Amount{MemoryMiB: sum(func(a fairshare.Amount) float64 { return a.MemoryMiB }),
		Cores:     sum(func(a fairshare.Amount) float64 { return a.Cores }),
		MIGSlices: sum(func(a fairshare.Amount) float64 { return a.MIGSlices })}
}

// slices writes a deserved number of MIG slices, to the slice ("3.5" when weights
// split one).
func slices(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Free is the card memory, cores and MIG slices no queue holds: the supply less every
// queue's allocation (placed tasks, and tasks charged as placed within the session).
func (s *Shares) Free() fairshare.Amount {
	s.mu.RLock()
	defer s.mu.RUnlock()
	free := s.total
	for _, q := range s.queues {
		free = free.Sub(q.allocated)
	}
	return free
}
