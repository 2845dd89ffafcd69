// Package fairshare divides the cluster's vGPU card memory and compute among
// Volcano queues by weight. Volcano's proportion plugin cannot do this itself: the
// card memory and core resources are on its ignore list, so for fractional-GPU work
// it weighs queues only by slots, CPU and memory, which are rarely what runs out.
//
// The package is pure: the scheduler plugin feeds it the session's numbers.
package fairshare

import (
	"fmt"
	"math"
	"sort"
)

// Amount is an amount of card resources: memory in MiB and compute in card
// percent points (100 is one whole card's SMs).
type Amount struct {
	MemoryMiB float64
	Cores     float64
}

// Unlimited is the capability of a queue that sets none.
var Unlimited = Amount{MemoryMiB: math.Inf(1), Cores: math.Inf(1)}

// Add returns a + b.
func (a Amount) Add(b Amount) Amount {
	return Amount{MemoryMiB: a.MemoryMiB + b.MemoryMiB, Cores: a.Cores + b.Cores}
}

// Sub returns a - b.
func (a Amount) Sub(b Amount) Amount {
	return Amount{MemoryMiB: a.MemoryMiB - b.MemoryMiB, Cores: a.Cores - b.Cores}
}

// Within reports whether a is at most limit in both dimensions, allowing for the
// rounding of float sums.
func (a Amount) Within(limit Amount) bool {
	return a.MemoryMiB <= limit.MemoryMiB+tolerance(limit.MemoryMiB) && a.Cores <= limit.Cores+tolerance(limit.Cores)
}

func (a Amount) String() string {
	return fmt.Sprintf("memory %s MiB, cores %s", num(a.MemoryMiB), num(a.Cores))
}

func num(v float64) string {
	if math.IsInf(v, 1) {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f", v)
}

func tolerance(v float64) float64 { return 1e-9 * math.Max(1, math.Abs(v)) }

// Claim is one queue's standing.
type Claim struct {
	// Weight is the queue's weight; a queue of weight 0 deserves nothing.
	Weight float64
	// Request is what the queue's tasks ask for, running and pending.
	Request Amount
	// Capability caps what the queue may hold; Unlimited when the queue sets none.
	Capability Amount
}

// Divide returns what each claim deserves of total, in claim order: in each
// dimension independently, weighted max-min fairness. A queue that asks for less
// than its weighted part gets what it asks; what it leaves is shared among the
// others by weight, until every queue is satisfied or the total is spent. No queue
// deserves more than its request or its capability.
func Divide(total Amount, claims []Claim) []Amount {
	out := make([]Amount, len(claims))
	mem := make([]float64, len(claims))
	cores := make([]float64, len(claims))
	weights := make([]float64, len(claims))
	for i, c := range claims {
		weights[i] = math.Max(0, c.Weight)
		mem[i] = math.Max(0, math.Min(c.Request.MemoryMiB, c.Capability.MemoryMiB))
		cores[i] = math.Max(0, math.Min(c.Request.Cores, c.Capability.Cores))
	}
	mem = waterFill(math.Max(0, total.MemoryMiB), weights, mem)
	cores = waterFill(math.Max(0, total.Cores), weights, cores)
	for i := range out {
		out[i] = Amount{MemoryMiB: mem[i], Cores: cores[i]}
	}
	return out
}

// waterFill shares total among demands by weight: the level λ rises until each
// demand is met or the total runs out, demand i receiving min(demand, weight·λ).
func waterFill(total float64, weights, demand []float64) []float64 {
	got := make([]float64, len(demand))
	var order []int
	for i := range demand {
		if weights[i] > 0 && demand[i] > 0 {
			order = append(order, i)
		}
	}
	// Serve the queues whose demand is smallest relative to their weight first:
	// if one is satisfied below the current level, so is every one before it.
	sort.SliceStable(order, func(a, b int) bool {
		return demand[order[a]]/weights[order[a]] < demand[order[b]]/weights[order[b]]
	})
	left, weight := total, 0.0
	for _, i := range order {
		weight += weights[i]
	}
	for k, i := range order {
		level := left / weight
		if demand[i] <= weights[i]*level {
			got[i] = demand[i]
			left -= demand[i]
			weight -= weights[i]
			continue
		}
		for _, j := range order[k:] {
			got[j] = weights[j] * level
		}
		break
	}
	return got
}

// Holding is one queue's position in a session: what it holds, what its weighted
// share is, and what it asks for in all (held plus pending).
type Holding struct {
	Allocated, Deserved, Request Amount
	// MinAsk is the cost of the queue's smallest pending task (zero: none).
	MinAsk Amount
}

// Spare is the capacity that no queue but skip holds or may still claim: total less
// every queue's holdings, less, for each other queue, the part of its share that it
// asks for and does not hold yet, when that part can take its smallest pending task
// (a share smaller than any of the queue's tasks is no use to it within its share).
// A queue may borrow from it beyond its own share without taking anything another
// queue could use, so cards do not sit idle while shares and task sizes disagree.
func Spare(total Amount, hs []Holding, skip int) Amount {
	spare := total
	for i, h := range hs {
		spare = spare.Sub(h.Allocated)
		if i == skip {
			continue
		}
		unmet := Amount{
			MemoryMiB: math.Max(0, math.Min(h.Deserved.MemoryMiB, h.Request.MemoryMiB)-h.Allocated.MemoryMiB),
			Cores:     math.Max(0, math.Min(h.Deserved.Cores, h.Request.Cores)-h.Allocated.Cores),
		}
		if h.MinAsk.Within(unmet) {
			spare = spare.Sub(unmet)
		}
	}
	return Amount{MemoryMiB: math.Max(0, spare.MemoryMiB), Cores: math.Max(0, spare.Cores)}
}

// Smaller orders costs for picking a queue's smallest task: by cores, then memory.
func Smaller(a, b Amount) bool {
	if a.Cores != b.Cores {
		return a.Cores < b.Cores
	}
	return a.MemoryMiB < b.MemoryMiB
}

// Below reports whether held is under share in every dimension that cost asks for:
// a queue there may still place a task, even one that takes it past its share.
func Below(held, share, cost Amount) bool {
	if cost.MemoryMiB > 0 && held.MemoryMiB >= share.MemoryMiB-tolerance(share.MemoryMiB) {
		return false
	}
	if cost.Cores > 0 && held.Cores >= share.Cores-tolerance(share.Cores) {
		return false
	}
	return cost.MemoryMiB > 0 || cost.Cores > 0
}
