package placement

import "github.com/tessera-gpu/tessera/api"

func benchLinked(cards []api.Card) *Node {
	inv := DGX1()
	for i := range inv.Cards {
		inv.Cards[i].MemoryMiB = 40000
	}
	return NewNode("linked", inv, 1)
}
