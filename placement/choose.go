package placement

import (
	"slices"
	"sort"

	"github.com/tessera-gpu/tessera/api"
)

// choose picks k of the candidates (card indices ascending, each with its card
// policy score) and writes them, ascending, into out.
//
//   - Without a link matrix the k best-scored cards win, as they always have;
//     a set spread over NUMA nodes gives way to the best one-NUMA set if any,
//     unless preferNUMA is off (the pod weighs NUMA at 0).
//   - With one, a single card goes to the best-scored card, ties going to the card
//     whose loss hurts the remaining cards least (topology policy: loss first);
//     several cards go to the best set by the search objective.
func choose(n *Node, cands []candidate, k int, p api.Policy, preferNUMA bool, out []int) {
	switch {
	case n.topo == nil || len(cands) > maxTopologyCards:
		chooseByScore(cands, k, out)
		if k > 1 && preferNUMA {
			preferOneNUMA(n, cands, k, out)
		}
	case k == 1:
		out[0] = chooseOne(n.topo, cands, p)
	default:
		chooseSet(n.topo, cands, k, out)
	}
}

// chooseByScore takes the k best-scored cards; the lower index breaks ties.
func chooseByScore(cands []candidate, k int, out []int) {
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].score != cands[b].score {
			return cands[a].score > cands[b].score
		}
		return cands[a].idx < cands[b].idx
	})
	for i := range out[:k] {
		out[i] = cands[i].idx
	}
	sort.Ints(out[:k])
}

// chooseOne picks a single card. loss is the link weight from the card to the
// other candidates: what the node's free cards lose when it is taken.
func chooseOne(t *topology, cands []candidate, p api.Policy) int {
	best, bestLoss := -1, 0.0
	for c := range cands {
		var loss float64
		for d := range cands {
			loss += t.pair(cands[c].idx, cands[d].idx)
		}
		if best < 0 || better(cands[c].score, loss, cands[best].score, bestLoss, p == api.PolicyTopology) {
			best, bestLoss = c, loss
		}
	}
	return cands[best].idx
}

// better orders single cards by (policy score, lower loss), or the other way round
// for the topology policy. Candidates arrive by index, so a tie keeps the first.
func better(score, loss, bestScore, bestLoss float64, lossFirst bool) bool {
	if lossFirst && loss != bestLoss {
		return loss < bestLoss
	}
	if score != bestScore {
		return score > bestScore
	}
	return loss < bestLoss
}

// chooseSet runs the k-set search over the candidates.
func chooseSet(t *topology, cands []candidate, k int, out []int) float64 {
	var idx [maxTopologyCards]int
	var u [maxTopologyCards]float64
	for i, c := range cands {
		idx[i], u[i] = c.idx, c.score
	}
	var s search
	s.init(t, idx[:len(cands)], u[:len(cands)], nil, k)
	return s.run(out[:k])
}

// PreferredCards chooses k of the free cards (indices into the node's cards) with
// no card policy to honour, must-include cards first: the device plugin's answer
// to GetPreferredAllocation for whole cards. ok is false when the request cannot
// be met from free.
func (n *Node) PreferredCards(free, must []int, k int) (out []int, ok bool) {
	if k <= 0 || k > len(free) || len(must) > k {
		return nil, false
	}
	for _, m := range must {
		if !slices.Contains(free, m) {
			return nil, false
		}
	}
	free = append([]int(nil), free...)
	sort.Ints(free)
	out = make([]int, k)
	if n.topo == nil || len(free) > maxTopologyCards {
		copy(out, must)
		i := len(must)
		for _, f := range free {
			if i < k && !slices.Contains(must, f) {
				out[i] = f
				i++
			}
		}
		sort.Ints(out)
		return out, true
	}
	var s search
	s.init(n.topo, free, nil, must, k)
	s.run(out)
	return out, true
}
