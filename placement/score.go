package placement

import "github.com/tessera-gpu/tessera/api"

// utilisation is a card's load with usage used plus (mem, cores): the mean of its
// memory and compute fractions, in 0..1.
func utilisation(c *CardState, used Usage, mem int64, cores int) float64 {
	if c.CapacityMiB <= 0 {
		return 1
	}
	m := float64(used.MemoryMiB+mem) / float64(c.CapacityMiB)
	k := float64(used.Cores+cores) / 100
	return min(1, (m+k)/2)
}

// cardScore rates placing (mem, cores) on card c beside usage used, 0..100. Binpack
// prefers the card that ends up fullest, keeping other cards whole for large
// requests; spread prefers the emptiest, keeping tenants apart.
func cardScore(c *CardState, used Usage, mem int64, cores int, p api.Policy) float64 {
	u := utilisation(c, used, mem, cores)
	if p == api.PolicySpread {
		return 100 * (1 - u)
	}
	return 100 * u
}

// nodeScore rates a node with extra usage on top of its own, 0..100, from the mean
// utilisation of its healthy cards: binpack favours full nodes, spread empty ones.
func nodeScore(n *Node, extra []Usage, p api.Policy) float64 {
	var sum float64
	var k int
	for i := range n.Cards {
		if !n.Cards[i].Healthy {
			continue
		}
		sum += utilisation(&n.Cards[i], usedWith(n, extra, i), 0, 0)
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
