package placement

import (
	"sort"
	"strconv"
	"strings"
)

// preferOneNUMA is the soft NUMA rule for nodes without a link matrix (with one,
// the NUMA bonus in the pair weights does the job): when the k best-scored cards in
// out span NUMA nodes, the best-scored k cards of one NUMA node replace them, if a
// node has k candidates. cands must be sorted best first.
func preferOneNUMA(n *Node, cands []candidate, k int, out []int) {
	first := n.Cards[out[0]].NUMA
	split := first < 0
	for _, i := range out[1:k] {
		if n.Cards[i].NUMA != first {
			split = true
		}
	}
	if !split {
		return
	}
	bestNUMA, bestSum := -1, 0.0
	for c := range cands {
		v := n.Cards[cands[c].idx].NUMA
		if v < 0 || seenNUMA(n, cands[:c], v) {
			continue
		}
		sum, got := 0.0, 0
		for d := c; d < len(cands) && got < k; d++ {
			if n.Cards[cands[d].idx].NUMA == v {
				sum += cands[d].score
				got++
			}
		}
		if got == k && (bestNUMA < 0 || sum > bestSum+eps || sum > bestSum-eps && v < bestNUMA) {
			bestNUMA, bestSum = v, sum
		}
	}
	if bestNUMA < 0 {
		return
	}
	got := 0
	for c := 0; c < len(cands) && got < k; c++ {
		if n.Cards[cands[c].idx].NUMA == bestNUMA {
			out[got] = cands[c].idx
			got++
		}
	}
	sort.Ints(out[:k])
}

func seenNUMA(n *Node, cands []candidate, v int) bool {
	for _, c := range cands {
		if n.Cards[c.idx].NUMA == v {
			return true
		}
	}
	return false
}

// chooseOneNUMA is the hard rule of api.AnnotationNUMABind: the k cards come from
// one known NUMA node, the node whose best set is best. cands arrive by index. ok is
// false when no NUMA node has k candidates; counts then says how many each has.
func chooseOneNUMA(n *Node, cands []candidate, k int, out []int) (ok bool, counts string) {
	var buf [maxTopologyCards]candidate
	var pick [maxTopologyCards]int
	bestNUMA, bestVal := -1, 0.0
	var parts []string
	unknown := 0
	for c := range cands {
		v := n.Cards[cands[c].idx].NUMA
		if v < 0 {
			unknown++
			continue
		}
		if seenNUMA(n, cands[:c], v) {
			continue
		}
		group := buf[:0]
		for d := c; d < len(cands) && len(group) < len(buf); d++ {
			if n.Cards[cands[d].idx].NUMA == v {
				group = append(group, cands[d])
			}
		}
		parts = append(parts, "node "+strconv.Itoa(v)+": "+strconv.Itoa(len(group)))
		if len(group) < k {
			continue
		}
		var val float64
		if n.topo != nil {
			val = chooseSet(n.topo, group, k, pick[:k])
		} else {
			chooseByScore(group, k, pick[:k])
			for _, g := range group[:k] {
				val += g.score
			}
		}
		if bestNUMA < 0 || val > bestVal+eps {
			bestNUMA, bestVal = v, val
			copy(out[:k], pick[:k])
		}
	}
	if bestNUMA >= 0 {
		return true, ""
	}
	if unknown > 0 {
		parts = append(parts, "unknown: "+strconv.Itoa(unknown))
	}
	return false, strings.Join(parts, ", ")
}
