package book

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// What the cluster's cards add up to: the gang checks of enqueue and job validity,
// and the supply the queue shares divide.

// Free sums what the healthy cards of nodes that take tasks have free now, and the
// smallest such card's memory; a cordoned card is left out like a cordoned node's, and
// a card an idle-only pod holds has nothing free.
// Total sums what every healthy card would have with every tenant gone, cordoned
// nodes' and cards' too: a cordon is an operator's pause, not a smaller cluster, so a
// gang is not called one that can never fit while nodes or cards are drained. Enqueue asks both of every job: the sums are kept until the next booking
// or release.
func (l *Ledger) Free() (Demand, int64) {
	c := l.capacity()
	return c.free, c.freeSmallest
}

// Total: see Free.
func (l *Ledger) Total() (Demand, int64) {
	c := l.capacity()
	return c.total, c.totalSmallest
}

func (l *Ledger) capacity() capacitySums {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if c := l.sums.Load(); c != nil && c.at == l.changes {
		return *c
	}
	c := capacitySums{at: l.changes}
	l.forHealthyCards(false, func(card *placement.CardState) {
		c.totalSmallest = smallerMemory(c.totalSmallest, card.MemoryMiB)
		c.total.MemoryMiB += card.CapacityMiB
		c.total.Cores += 100
		c.total.Slots += int64(card.Shares)
	})
	l.forHealthyCards(true, func(card *placement.CardState) {
		c.freeSmallest = smallerMemory(c.freeSmallest, card.MemoryMiB)
		if card.Used.IdleOnly > 0 {
			return // what its idle-only holder leaves free, no other pod may take
		}
		c.free.MemoryMiB += max(0, card.FreeMiB())
		c.free.Cores += int64(max(0, card.FreeCores()))
		c.free.Slots += int64(max(0, card.Shares-card.Used.Tenants))
	})
	l.sums.Store(&c)
	return c
}

func smallerMemory(smallest, mib int64) int64 {
	if smallest == 0 || mib < smallest {
		return mib
	}
	return smallest
}

// forHealthyCards calls fn for every healthy card that is not MIG; withoutCordoned
// leaves out cordoned cards and the cards of cordoned nodes. The caller holds the
// ledger's lock.
func (l *Ledger) forHealthyCards(withoutCordoned bool, fn func(c *placement.CardState)) {
	for _, n := range l.nodes {
		if withoutCordoned && l.cordoned[n.Name] {
			continue
		}
		for i := range n.Cards {
			if c := &n.Cards[i]; c.Healthy && !c.MIG && !(withoutCordoned && c.Cordon != nil) {
				fn(c)
			}
		}
	}
}

// CardTotals sums the schedulable memory and compute of every card that can take
// vGPU tasks (healthy, not MIG, neither it nor its node cordoned), and the mean card
// memory: the supply the queue shares divide. Cards in MIG mode that take pods by the
// same rule (healthy, neither it nor its node cordoned) add their compute slices
// (fairshare.CardMIGSlices) to the MIG dimension only, never to card memory, cores or
// the mean (fairshare.Cards.Requested says why).
// The cards of DRA nodes that take claims add their memory and 100 cores each; they do
// not count in the mean either (it costs vGPU requests, which never go there).
func (l *Ledger) CardTotals() (fairshare.Amount, int64) {
	var total fairshare.Amount
	var physical, cards int64
	l.mu.RLock()
	defer l.mu.RUnlock()
	l.forHealthyCards(true, func(c *placement.CardState) {
		total.MemoryMiB += float64(c.CapacityMiB)
		total.Cores += 100
		physical += c.MemoryMiB
		cards++
	})
	l.dra.supply(func(c *placement.CardState) {
		total.MemoryMiB += float64(c.CapacityMiB)
		total.Cores += 100
	})
	for _, n := range l.nodes {
		if l.cordoned[n.Name] {
			continue
		}
		for i := range n.Cards {
			if c := &n.Cards[i]; c.Healthy && c.MIG && c.Cordon == nil {
				total.MIGSlices += fairshare.CardMIGSlices(c.Card)
			}
		}
	}
	if cards == 0 {
		return total, 0
	}
	return total, physical / cards
}

// NeverFits returns why a request fits no node even with every card idle and
// uncordoned, or "",
// and the reason category for the pending metric.
func (l *Ledger) NeverFits(r *placement.Request) (why, category string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	why, category = l.noCardsReason(), PendingNoInventory
	// Report the refusal of the node the pod aims at (most cards past its own filters;
	// ties to the first name), not whichever node came last: a pod pinned to an
	// unhealthy card must hear "unhealthy", not another node's "excluded by UUID".
	best, bestNode := -1, ""
	for name, n := range l.nodes {
		idle := n.Clone()
		idle.ForgetMIGHolders()
		for i := range idle.Cards {
			// Idle, and uncordoned: a cordon is a pause, so the pod waits with the
			// predicate's reason (the card and why) rather than being called one that
			// can never run.
			idle.Cards[i].Used, idle.Cards[i].Cordon = placement.Usage{}, nil
		}
		_, ferr := placement.FitPod(idle, r)
		if ferr == nil {
			return "", ""
		}
		if t := ferr.Targeted(); t > best || t == best && name < bestNode {
			best, bestNode = t, name
			why, category = refusal(ferr), refusalOf(ferr)
		}
	}
	if len(l.unusable) > 0 && len(l.nodes) > 0 {
		// The node that would fit may be one whose agent is gone: say so.
		why += "; nodes whose vGPU inventory is unusable: " + l.unusableSummary()
	}
	return why, category
}

// noCardsReason explains a cluster without usable vGPU nodes, naming a few of the
// nodes whose inventory was refused so that the operator sees the agent problem.
func (l *Ledger) noCardsReason() string {
	if len(l.unusable) == 0 {
		return "no node has vGPU cards"
	}
	return "no node has usable vGPU cards (" + l.unusableSummary() + ")"
}

// unusableSummary names up to three nodes whose inventory was refused, and why.
func (l *Ledger) unusableSummary() string {
	names := make([]string, 0, len(l.unusable))
	for n := range l.unusable {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names[:min(3, len(names))] {
		parts = append(parts, "node "+n+": "+l.unusable[n])
	}
	if len(names) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(names)-3))
	}
	return strings.Join(parts, "; ")
}
