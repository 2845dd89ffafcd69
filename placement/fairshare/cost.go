package fairshare

import (
	"github.com/tessera-gpu/tessera/api"
)

// Cards is what the queue shares know of the cards they divide, to charge a pod for
// what it takes from the other queues. A pod that shares its cards is charged what it
// asks of each; a pod that holds its cards alone (api.PolicyIdleOnly: no other pod may
// join them) is charged each card whole, the card's schedulable memory and 100 cores,
// since all of it leaves the supply the other queues share (book.Ledger.CardTotals
// counts each card's schedulable memory and 100 cores). Charging such a pod what it
// asks would let a queue take whole cards at the price of 1 MiB and 1 core each.
//
// A card's CUDA context reserve does not change the charge: it is counted inside each
// container's memory limit, not taken off the card's capacity.
type Cards struct {
	// RefMiB is the mean card's memory: a percentage of memory is costed on it before
	// the card is chosen.
	RefMiB int64
	// WholeMiB is the mean card's schedulable memory (RefMiB times the memory
	// oversubscription): what a pod that will hold its cards alone is charged per card
	// before they are chosen, and per card the book does not know once placed.
	WholeMiB int64
	// CapacityMiB returns a card's schedulable memory by UUID, false for a card the
	// book does not know; nil knows none.
	CapacityMiB func(uuid string) (int64, bool)
}

// Requested is what containers ask of the cluster before their cards are chosen.
// A memory percentage is costed on a card of RefMiB, the mean card size, since the
// card it will land on is not known yet. A pod that asks for idle cards only
// (idleOnly) is charged, per card it asks for, a whole card: WholeMiB (or what it asks,
// if more) and 100 cores. Containers of one pod may share a card, so for a pod of
// several containers this may be more than it will hold; once placed it is charged
// what it holds (Assigned).
//
// Whole MIG instances cost nothing here, nor once placed (Assigned), and cards in MIG
// mode add nothing to the supply the queues share (book.Ledger.CardTotals). Counting
// them in one pool of card memory and cores with whole and shared cards would give each
// queue a share of capacity only MIG pods can use: a queue of card pods would be
// reclaimed down to a share it can never fill (e2e
// TestReclaimGivesTheLateQueueItsShareOfCards fails that way). Instances would need a
// dimension of their own.
func (k Cards) Requested(cs []api.ContainerRequest, idleOnly bool) Amount {
	var a Amount
	for _, c := range cs {
		if c.MIGProfile != "" {
			continue
		}
		mem, cores := c.MemoryMiB, int64(c.Cores)
		if mem == 0 {
			mem = max(1, k.RefMiB*int64(c.MemoryPercent)/100)
		}
		if idleOnly {
			mem, cores = max(mem, k.WholeMiB), 100
		}
		a.MemoryMiB += float64(int64(c.Cards) * mem)
		a.Cores += float64(int64(c.Cards) * cores)
	}
	return a
}

// Assigned is what an assignment holds: exact, from the chosen cards; whole MIG
// instances hold nothing (see Requested). A pod that holds its cards alone (idleOnly)
// is charged each card once, however many of its containers share it: the card's
// schedulable memory (CapacityMiB; WholeMiB for a card the book does not know; never
// less than what its containers were assigned there) and 100 cores.
func (k Cards) Assigned(cs []api.ContainerAssignment, idleOnly bool) Amount {
	var a Amount
	var whole map[string]int64 // idle-only: what the pod's containers were assigned on each card
	for _, c := range cs {
		for _, card := range c.Cards {
			switch {
			case card.IsMIG():
			case idleOnly:
				if whole == nil {
					whole = map[string]int64{}
				}
				whole[card.UUID] += card.MemoryMiB
			default:
				a.MemoryMiB += float64(card.MemoryMiB)
				a.Cores += float64(card.Cores)
			}
		}
	}
	for uuid, assigned := range whole {
		capacity, known := k.capacity(uuid)
		if !known {
			capacity = k.WholeMiB
		}
		a.MemoryMiB += float64(max(capacity, assigned))
		a.Cores += 100
	}
	return a
}

func (k Cards) capacity(uuid string) (int64, bool) {
	if k.CapacityMiB == nil {
		return 0, false
	}
	return k.CapacityMiB(uuid)
}
