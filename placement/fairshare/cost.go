package fairshare

import (
	"github.com/tessera-gpu/tessera/api"
)

// Requested is what containers ask of the cluster before their cards are chosen.
// A memory percentage is costed on a card of refMiB, the mean card size, since
// the card it will land on is not known yet.
//
// Whole MIG instances cost nothing here, nor once placed (Assigned), and cards in MIG
// mode add nothing to the supply the queues share (book.Ledger.CardTotals). Counting
// them in one pool of card memory and cores with whole and shared cards would give each
// queue a share of capacity only MIG pods can use: a queue of card pods would be
// reclaimed down to a share it can never fill (e2e
// TestReclaimGivesTheLateQueueItsShareOfCards fails that way). Instances would need a
// dimension of their own.
func Requested(cs []api.ContainerRequest, refMiB int64) Amount {
	var a Amount
	for _, c := range cs {
		if c.MIGProfile != "" {
			continue
		}
		mem := c.MemoryMiB
		if mem == 0 {
			mem = max(1, refMiB*int64(c.MemoryPercent)/100)
		}
		a.MemoryMiB += float64(int64(c.Cards) * mem)
		a.Cores += float64(c.Cards * c.Cores)
	}
	return a
}

// Assigned is what an assignment holds: exact, from the chosen cards; whole MIG
// instances hold nothing (see Requested).
func Assigned(cs []api.ContainerAssignment) Amount {
	var a Amount
	for _, c := range cs {
		for _, card := range c.Cards {
			if card.IsMIG() {
				continue
			}
			a.MemoryMiB += float64(card.MemoryMiB)
			a.Cores += float64(card.Cores)
		}
	}
	return a
}
