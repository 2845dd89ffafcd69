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
	// MIGSlices are the compute slices of whole MIG instances (an instance of profile
	// "3g.40gb" is 3; MIGSlices). They are a dimension of their own: only MIG pods can
	// use an instance, so counting instances in card memory and cores would hand every
	// queue a share of capacity only MIG pods can use.
	MIGSlices float64
}

// Unlimited is the capability of a queue that sets none.
var Unlimited = Amount{MemoryMiB: math.Inf(1), Cores: math.Inf(1), MIGSlices: math.Inf(1)}

// Add returns a + b.
func (a Amount) Add(b Amount) Amount {
	return Amount{MemoryMiB: a.MemoryMiB + b.MemoryMiB, Cores: a.Cores + b.Cores, MIGSlices: a.MIGSlices + b.MIGSlices}
}

// Sub returns a - b.
func (a Amount) Sub(b Amount) Amount {
	return Amount{MemoryMiB: a.MemoryMiB - b.MemoryMiB, Cores: a.Cores - b.Cores, MIGSlices: a.MIGSlices - b.MIGSlices}
}

// Within reports whether a is at most limit in every dimension, allowing for the
// rounding of float sums.
func (a Amount) Within(limit Amount) bool {
	return a.MemoryMiB <= limit.MemoryMiB+tolerance(limit.MemoryMiB) && a.Cores <= limit.Cores+tolerance(limit.Cores) &&
		a.MIGSlices <= limit.MIGSlices+tolerance(limit.MIGSlices)
}

// OpenUnasked is limit with the dimensions a task costing cost does not reach left
// unbounded: MIG slices for a task without MIG instances, card memory and cores for a
// task of MIG instances only. Card pods are thus never held to their queue's MIG
// holdings, nor MIG pods to its card holdings; card memory and cores stay bound
// together, as they always were.
func OpenUnasked(limit, cost Amount) Amount {
	if cost.MIGSlices == 0 {
		limit.MIGSlices = math.Inf(1)
	} else if cost.MemoryMiB == 0 && cost.Cores == 0 {
		limit.MemoryMiB, limit.Cores = math.Inf(1), math.Inf(1)
	}
	return limit
}

// Cards is a's card memory and cores alone, without MIG slices.
func (a Amount) Cards() Amount { return Amount{MemoryMiB: a.MemoryMiB, Cores: a.Cores} }

// MIG is a's MIG slices alone.
func (a Amount) MIG() Amount { return Amount{MIGSlices: a.MIGSlices} }

// String names memory and cores, and MIG slices when there are any (amounts without
// MIG read as they always have).
func (a Amount) String() string {
	s := fmt.Sprintf("memory %s MiB, cores %s", num(a.MemoryMiB), num(a.Cores))
	if a.MIGSlices != 0 && !math.IsInf(a.MIGSlices, 1) {
		s += fmt.Sprintf(", MIG slices %s", num(a.MIGSlices))
	}
	return s
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
	// Guarantee is what the queue deserves whatever its weight, as far as it asks
	// for it (zero when the queue sets none). When the guarantees together exceed
	// the total, each gets the same fraction of its own.
	Guarantee Amount
}

// Divide returns what each claim deserves of total, in claim order: in each
// dimension independently, weighted max-min fairness above the guarantees. A queue
// that asks for less than its weighted part gets what it asks; what it leaves is
// shared among the others by weight, until every queue is satisfied or the total is
// spent. No queue deserves more than its request or its capability, nor less than
// its guarantee (within its request).
func Divide(total Amount, claims []Claim) []Amount {
	out := make([]Amount, len(claims))
	n := len(claims)
	mem, cores, slices := make([]float64, n), make([]float64, n), make([]float64, n)
	memFloor, coresFloor, slicesFloor := make([]float64, n), make([]float64, n), make([]float64, n)
	weights := make([]float64, n)
	for i, c := range claims {
		weights[i] = math.Max(0, c.Weight)
		mem[i] = math.Max(0, math.Min(c.Request.MemoryMiB, c.Capability.MemoryMiB))
		cores[i] = math.Max(0, math.Min(c.Request.Cores, c.Capability.Cores))
		slices[i] = math.Max(0, math.Min(c.Request.MIGSlices, c.Capability.MIGSlices))
		memFloor[i] = math.Max(0, math.Min(c.Guarantee.MemoryMiB, mem[i]))
		coresFloor[i] = math.Max(0, math.Min(c.Guarantee.Cores, cores[i]))
		slicesFloor[i] = math.Max(0, math.Min(c.Guarantee.MIGSlices, slices[i]))
	}
	mem = waterFill(math.Max(0, total.MemoryMiB), weights, mem, memFloor)
	cores = waterFill(math.Max(0, total.Cores), weights, cores, coresFloor)
	slices = waterFill(math.Max(0, total.MIGSlices), weights, slices, slicesFloor)
	for i := range out {
		out[i] = Amount{MemoryMiB: mem[i], Cores: cores[i], MIGSlices: slices[i]}
	}
	return out
}

// waterFill shares total among demands by weight above each demand's floor (floor ≤
// demand): the level λ rises until the total is spent, demand i receiving
// max(floor, min(demand, weight·λ)). Each share is piecewise linear in λ, so the
// level is found exactly on the segment between two breakpoints where the sum
// crosses the total.
func waterFill(total float64, weights, demand, floor []float64) []float64 {
	got := make([]float64, len(demand))
	sumFloor := 0.0
	for _, f := range floor {
		sumFloor += f
	}
	if sumFloor >= total {
		// The guarantees alone spend the total: each gets the same fraction.
		for i, f := range floor {
			if sumFloor > 0 {
				got[i] = f * total / sumFloor
			}
		}
		return got
	}
	share := func(i int, level float64) float64 {
		if weights[i] == 0 {
			return floor[i]
		}
		return math.Max(floor[i], math.Min(demand[i], weights[i]*level))
	}
	var breaks []float64
	for i := range demand {
		if weights[i] > 0 {
			breaks = append(breaks, floor[i]/weights[i], demand[i]/weights[i])
		}
	}
	sort.Float64s(breaks)
	sum := func(level float64) float64 {
		s := 0.0
		for i := range demand {
			s += share(i, level)
		}
		return s
	}
	level := math.Inf(1)
	low := 0.0
	for _, b := range breaks {
		if sum(b) < total {
			low = b
			continue
		}
		// Between low and b each share is constant or weight·λ: solve for λ.
		mid, fixed, slope := (low+b)/2, 0.0, 0.0
		for i := range demand {
			if weights[i] > 0 && weights[i]*mid > floor[i] && weights[i]*mid < demand[i] {
				slope += weights[i]
			} else {
				fixed += share(i, mid)
			}
		}
		level = b
		if slope > 0 {
			level = (total - fixed) / slope
		}
		break
	}
	for i := range demand {
		got[i] = share(i, level)
	}
	return got
}

// Holding is one queue's position in a session: what it holds, what its weighted
// share is, and what it asks for in all (held plus pending).
type Holding struct {
	Allocated, Deserved, Request Amount
	// MinAsk is the cost of the queue's smallest pending task that asks for card
	// memory or cores (zero: none); MinMIGAsk that of its smallest pending MIG task.
	MinAsk, MinMIGAsk Amount
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
		if h.MinAsk.Cards().Within(unmet) {
			spare = spare.Sub(unmet)
		}
		// MIG slices apart: a queue's smallest MIG task decides whether its unmet MIG
		// share is any use to it, its card tasks whether its unmet card share is.
		unmetMIG := Amount{MIGSlices: math.Max(0, math.Min(h.Deserved.MIGSlices, h.Request.MIGSlices)-h.Allocated.MIGSlices)}
		if h.MinMIGAsk.Within(unmetMIG) {
			spare = spare.Sub(unmetMIG)
		}
	}
	return Amount{MemoryMiB: math.Max(0, spare.MemoryMiB), Cores: math.Max(0, spare.Cores), MIGSlices: math.Max(0, spare.MIGSlices)}
}

// Smaller orders costs for picking a queue's smallest task: by cores, then memory,
// then MIG slices.
func Smaller(a, b Amount) bool {
	if a.Cores != b.Cores {
		return a.Cores < b.Cores
	}
	if a.MemoryMiB != b.MemoryMiB {
		return a.MemoryMiB < b.MemoryMiB
	}
	return a.MIGSlices < b.MIGSlices
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
	if cost.MIGSlices > 0 && held.MIGSlices >= share.MIGSlices-tolerance(share.MIGSlices) {
		return false
	}
	return cost.MemoryMiB > 0 || cost.Cores > 0 || cost.MIGSlices > 0
}
