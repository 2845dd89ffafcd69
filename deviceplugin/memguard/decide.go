package memguard

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// NotAvailable is what NVML reports as a process's memory when it cannot tell
// (NVML_VALUE_NOT_AVAILABLE): such a process is never judged on it.
const NotAvailable = ^uint64(0)

// Process is one process NVML lists on a card, with the pod its cgroup names.
type Process struct {
	PID       int
	UsedBytes uint64
	// Pod is empty for a process outside every pod (or one whose cgroup could not be
	// read: it exited between NVML's list and the read).
	Pod types.UID
}

// Card is what NVML lists on one card in one check.
type Card struct {
	UUID      string
	Processes []Process
}

// Key names a pod's use of one card.
type Key struct {
	Pod  types.UID
	Card string
}

// Policy is how much a pod may hold on a card beyond its memory limit.
type Policy struct {
	// ContextAllowance is counted per process on top of the limit: the driver's own
	// footprint of a CUDA context, which NVML counts and the limit does not unless
	// vgpu-core's context reserve is set.
	ContextAllowance uint64
	// CountedProcesses caps how many processes of a pod on a card earn the allowance, so
	// that a pod cannot widen its margin by starting processes.
	CountedProcesses int
}

// Allowed is what a pod may hold on a card: its containers' limits there plus the
// context allowance for its first CountedProcesses processes. A card the pod was not
// given allows nothing, not even a context.
func (p Policy) Allowed(limit uint64, processes int) uint64 {
	if limit == 0 {
		return 0
	}
	n := processes
	if n > p.CountedProcesses {
		n = p.CountedProcesses
	}
	return addSat(limit, mulSat(p.ContextAllowance, uint64(max(n, 0))))
}

// Excess is a pod holding more of a card than it is allowed.
type Excess struct {
	Key
	Used, Allowed, Limit uint64
	Processes            int
	// Victims are the pod's processes to stop, largest first, fewest that bring the pod
	// within its allowance.
	Victims []Process
}

// Judgement is one check's verdict over the node's cards.
type Judgement struct {
	Excesses []Excess
	// Unmanaged is the memory, per card, of processes in pods that hold no Tessera
	// assignment on this node (or outside every pod): a coexisting device plugin's pods or
	// host processes. They are reported, never stopped.
	Unmanaged map[string]uint64
	// Unknown counts processes whose memory NVML could not tell.
	Unknown int
}

// Judge compares what each pod's processes hold on each card (from NVML: what the
// container reports about itself plays no part) with its limits: limits[pod][card] is the
// sum of the memory limits of the pod's containers on the card, in bytes. A pod in limits
// is managed: its processes on a card it was not given count against a limit of 0.
func Judge(cards []Card, limits map[types.UID]map[string]uint64, p Policy) Judgement {
	j := Judgement{Unmanaged: map[string]uint64{}}
	for _, c := range cards {
		byPod := map[types.UID][]Process{}
		for _, pr := range c.Processes {
			if pr.UsedBytes == NotAvailable {
				j.Unknown++
				continue
			}
			if _, managed := limits[pr.Pod]; pr.Pod == "" || !managed {
				j.Unmanaged[c.UUID] = addSat(j.Unmanaged[c.UUID], pr.UsedBytes)
				continue
			}
			byPod[pr.Pod] = append(byPod[pr.Pod], pr)
		}
		for pod, procs := range byPod {
			limit := limits[pod][c.UUID]
			if e, over := judgePod(Key{Pod: pod, Card: c.UUID}, limit, procs, p); over {
				j.Excesses = append(j.Excesses, e)
			}
		}
	}
	sort.Slice(j.Excesses, func(a, b int) bool {
		if j.Excesses[a].Card != j.Excesses[b].Card {
			return j.Excesses[a].Card < j.Excesses[b].Card
		}
		return j.Excesses[a].Pod < j.Excesses[b].Pod
	})
	return j
}

func judgePod(k Key, limit uint64, procs []Process, p Policy) (Excess, bool) {
	var used uint64
	for _, pr := range procs {
		used = addSat(used, pr.UsedBytes)
	}
	allowed := p.Allowed(limit, len(procs))
	if used <= allowed {
		return Excess{}, false
	}
	sorted := append([]Process(nil), procs...)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].UsedBytes != sorted[b].UsedBytes {
			return sorted[a].UsedBytes > sorted[b].UsedBytes
		}
		return sorted[a].PID < sorted[b].PID
	})
	e := Excess{Key: k, Used: used, Allowed: allowed, Limit: limit, Processes: len(procs)}
	// Each process stopped frees its memory and, below the cap, its context allowance.
	left := used
	for _, pr := range sorted {
		if left <= p.Allowed(limit, len(procs)-len(e.Victims)) {
			break
		}
		e.Victims = append(e.Victims, pr)
		left -= pr.UsedBytes
	}
	return e, true
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0) - 1 // never NotAvailable
	}
	return a + b
}

func mulSat(a, b uint64) uint64 {
	if a != 0 && b > (^uint64(0)-1)/a {
		return ^uint64(0) - 1
	}
	return a * b
}
