package fairshare

import "github.com/tessera-gpu/tessera/api"

// Requested is what containers ask of the cluster before their cards are chosen.
// A memory percentage is costed on a card of refMiB, the mean card size, since
// the card it will land on is not known yet.
func Requested(cs []api.ContainerRequest, refMiB int64) Amount {
	var a Amount
	for _, c := range cs {
		mem := c.MemoryMiB
		if mem == 0 {
			mem = max(1, refMiB*int64(c.MemoryPercent)/100)
		}
		a.MemoryMiB += float64(int64(c.Cards) * mem)
		a.Cores += float64(c.Cards * c.Cores)
	}
	return a
}

// Assigned is what an assignment holds: exact, from the chosen cards.
func Assigned(cs []api.ContainerAssignment) Amount {
	var a Amount
	for _, c := range cs {
		for _, card := range c.Cards {
			a.MemoryMiB += float64(card.MemoryMiB)
			a.Cores += float64(card.Cores)
		}
	}
	return a
}
