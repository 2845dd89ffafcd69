package engine

import "github.com/tessera-gpu/tessera/api"

// utilisation is a card's load after adding mem and cores: the mean of its memory
// and compute fractions, in 0..1.
func utilisation(c *CardState, mem int64, cores int) float64 {
	if c.CapacityMiB <= 0 {
		return 1
	}
	m := float64(c.Used.MemoryMiB+mem) / float64(c.CapacityMiB)
	k := float64(c.Used.Cores+cores) / 100
	return min(1, (m+k)/2)
}

// CardScore rates placing (mem, cores) on card c, 0..100. Binpack prefers the card
// that ends up fullest, keeping other cards whole for large requests; spread prefers
// the emptiest, keeping tenants apart.
func CardScore(c *CardState, mem int64, cores int, p api.Policy) float64 {
	u := utilisation(c, mem, cores)
	if p == api.PolicySpread {
		return 100 * (1 - u)
	}
	return 100 * u
}

// NodeScore rates a node after a placement, 0..100, from the mean utilisation of its
// healthy cards: binpack favours full nodes, spread empty ones.
func NodeScore(n *Node, p api.Policy) float64 {
	var sum float64
	var k int
	for i := range n.Cards {
		if !n.Cards[i].Healthy {
			continue
		}
		sum += utilisation(&n.Cards[i], 0, 0)
		k++
	}
	if k == 0 {
		return 0
	}
	u := sum / float64(k)
	if p == api.PolicySpread {
		return 100 * (1 - u)
	}
	return 100 * u
}
