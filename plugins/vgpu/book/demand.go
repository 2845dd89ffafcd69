package book

import (
	"fmt"
	"sort"

	"github.com/tessera-gpu/tessera/placement"
)

// Demand is a lower bound on what tasks take from the cluster's cards, or what the
// cards have to give (Ledger.Free, Ledger.Total).
type Demand struct {
	MemoryMiB int64
	Cores     int64
	Slots     int64
}

// capacitySums are the ledger's Free and Total as of its changes count at.
type capacitySums struct {
	at                          uint64
	free, total                 Demand
	freeSmallest, totalSmallest int64
}

// taskDemand bounds a request from below: percentage memory is priced at the
// smallest card, so a job refused on these figures can never fit. A request for whole
// MIG instances takes nothing from the shared cards these figures sum (MIG cards are
// not among them), so its bound is zero: the predicate judges it on the instances.
func taskDemand(r *placement.Request, smallestMiB int64) Demand {
	var d Demand
	if r.Options.MIGProfile != "" {
		return d
	}
	for _, c := range r.Containers {
		mem := c.MemoryMiB
		if mem == 0 {
			mem = max(1, smallestMiB*int64(c.MemoryPercent)/100)
		}
		d.MemoryMiB += int64(c.Cards) * mem
		d.Cores += int64(c.Cards * c.Cores)
		d.Slots += int64(c.Cards)
	}
	return d
}

// Exceeds reports why the cheapest need members of reqs cannot fit in capacity c,
// or "" when they might; what names the capacity ("free in the cluster"). Cheapest
// first: if even they exceed it, no choice of members fits.
func Exceeds(reqs []*TaskRequest, need int, c Demand, smallestMiB int64, what string) string {
	ds := make([]Demand, len(reqs))
	for i, tr := range reqs {
		ds[i] = taskDemand(tr.Req, smallestMiB)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].MemoryMiB < ds[j].MemoryMiB })
	var sum Demand
	for _, d := range ds[:min(need, len(ds))] {
		sum.MemoryMiB += d.MemoryMiB
		sum.Cores += d.Cores
		sum.Slots += d.Slots
	}
	switch {
	case sum.Slots > c.Slots:
		return fmt.Sprintf("%d card shares needed by %d members, %d %s", sum.Slots, need, c.Slots, what)
	case sum.MemoryMiB > c.MemoryMiB:
		return fmt.Sprintf("%d MiB of card memory needed by %d members, %d MiB %s", sum.MemoryMiB, need, c.MemoryMiB, what)
	case sum.Cores > c.Cores:
		return fmt.Sprintf("%d%% of card cores needed by %d members, %d%% %s", sum.Cores, need, c.Cores, what)
	}
	return ""
}
