package placement

import "github.com/tessera-gpu/tessera/api"

// LinkScore grades the connection between two cards the way NVIDIA's
// go-gpuallocator best-effort policy does: 100 per NVLink, then 60 for two GPUs on
// one board, 50 for one PCIe switch, 40 for several switches, 30 through a host
// bridge, 20 within a CPU and 10 across CPUs. Using its scale keeps our totals
// comparable with its results.
func LinkScore(l api.LinkType) int {
	if n, ok := l.NVLinks(); ok {
		return 100 * n
	}
	switch l {
	case api.LinkSameBoard:
		return 60
	case api.LinkPCIeSingle:
		return 50
	case api.LinkPCIeMulti:
		return 40
	case api.LinkHostBridge:
		return 30
	case api.LinkSameNUMA:
		return 20
	case api.LinkCrossNUMA:
		return 10
	}
	return 0
}

// linkGrade maps a link score onto 0..1 for node scores, which must compare nodes
// with each other: every NVLink pair grades above every PCIe pair, and the grade
// saturates at twelve links (an A100 NVSwitch), so newer parts do not squeeze the
// range everybody else lives in.
func linkGrade(score float64) float64 {
	if score >= 100 {
		return min(1, 0.5+score/2400)
	}
	return score / 120
}

// Weights of the set objective (see topology.objective). They are fixed rather
// than arguments: they order tie-breaks within the link scale, which users tune
// through the card policy, not through numbers.
const (
	// numaBonus is added to the link score of two cards on one known NUMA node:
	// half a PCIe level, so it breaks ties between equal links without ever
	// outweighing a better link.
	numaBonus = 5
	// fragmentationWeight scales how much of the remaining free cards' connection
	// to the chosen set is counted as lost.
	fragmentationWeight = 0.1
	// policyWeight scales the card policy's 0..100 score into the objective, so that
	// binpack or spread decides between sets of equal links.
	policyWeight = 0.05
	// maxTopologyCards bounds the cards a topology search considers; larger nodes,
	// which do not exist today, fall back to link-blind choice.
	maxTopologyCards = 64
)

// topology is a node's pairwise link scores with the NUMA bonus folded in,
// immutable once built and shared by a node's clones.
type topology struct {
	n int
	// w[i*n+j] is the weight of the pair (i, j); zero on the diagonal.
	w []float64
	// link[i*n+j] is the pair's bare LinkScore, for grading.
	link []int32
}

// newTopology reads the inventory's link matrix; nil when it has none.
func newTopology(inv *api.NodeInventory) *topology {
	n := len(inv.Cards)
	if inv.Links == nil || len(inv.Links) != n || n < 2 || n > maxTopologyCards {
		return nil
	}
	t := &topology{n: n, w: make([]float64, n*n), link: make([]int32, n*n)}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j || len(inv.Links[i]) != n {
				continue
			}
			t.link[i*n+j] = int32(LinkScore(inv.Links[i][j]))
			w := float64(t.link[i*n+j])
			if a, b := inv.Cards[i].NUMA, inv.Cards[j].NUMA; a >= 0 && a == b {
				w += numaBonus
			}
			t.w[i*n+j] = w
		}
	}
	return t
}

func (t *topology) pair(i, j int) float64 { return t.w[i*t.n+j] }

// LinkTotal is the sum of go-gpuallocator pair scores over a set of card indices:
// the figure both allocators are compared on. links is the inventory's matrix.
func LinkTotal(links [][]api.LinkType, set []int) int {
	total := 0
	for a := 0; a < len(set); a++ {
		for b := a + 1; b < len(set); b++ {
			total += LinkScore(links[set[a]][set[b]])
		}
	}
	return total
}

// setGrade is the 0..100 link quality of a chosen set for node scoring: the mean
// grade of its pairs (without the NUMA bonus, which is a tie-break, not quality).
func (t *topology) setGrade(set []int) float64 {
	var sum float64
	pairs := 0
	for a := 0; a < len(set); a++ {
		for b := a + 1; b < len(set); b++ {
			sum += linkGrade(float64(t.link[set[a]*t.n+set[b]]))
			pairs++
		}
	}
	if pairs == 0 {
		return 0
	}
	return 100 * sum / float64(pairs)
}

// peerGrade is the 0..100 link quality from card c to its best `peers` idle cards
// on the node, a missing peer counting as no link: how well the rest of a gang
// could join c here.
func (t *topology) peerGrade(n *Node, c, peers int) float64 {
	peers = min(peers, t.n-1)          // a node holds at most its own cards
	var best [maxTopologyCards]float64 // descending
	got := 0
	for j := range n.Cards {
		if j != c && n.Cards[j].Used.Tenants == 0 && n.Cards[j].Healthy {
			got = keepLargest(&best, got, peers, linkGrade(float64(t.link[c*t.n+j])))
		}
	}
	return 100 * sumOf(best[:got]) / float64(peers)
}

// keepLargest offers x to top[:n], the largest values offered so far in descending
// order, keeping at most k (k ≥ 1) of them, and returns how many it keeps. The
// arrays are fixed so that the hot paths that need them (peerGrade, the search's
// bound) allocate nothing, and n stays in a register.
func keepLargest(top *[maxTopologyCards]float64, n, k int, x float64) int {
	if n == k && x <= top[n-1] {
		return n
	}
	if n < k {
		n++
	}
	i := n - 1
	for ; i > 0 && top[i-1] < x; i-- {
		top[i] = top[i-1]
	}
	top[i] = x
	return n
}

// sumOf adds up vs.
func sumOf(vs []float64) float64 {
	var total float64
	for _, v := range vs {
		total += v
	}
	return total
}
