package placement

import "github.com/tessera-gpu/tessera/api"

// A pod's score weights (api.AnnotationScoreWeights) weigh three terms wherever they
// rank its placements. A term the pod does not name keeps the weight it has without
// the annotation, so a pod without it is placed and scored exactly as before.
//
//   - Node score: policy × the node policy's 0..100 score + topology × the 0..100
//     link quality of its multi-card containers + numa × their 0..100 NUMA locality
//     (nodeScoreOf). Unnamed: policy 1, topology vgpu.TopologyWeight, numa 0.
//   - Card choice: the card policy's score × policy, and on nodes with a link matrix
//     the pair weights' links × topology and NUMA bonus × numa (Node.weighed);
//     without a matrix numa=0 drops the preference for one NUMA node. Unnamed: 1.

// nodeTerms are a placement's node-score terms, each 0..100: Policy is the node
// policy's score, Links the link quality of the pod's multi-card containers (or a
// gang member's peer grade) where HasLinks, NUMA their NUMA locality where HasNUMA.
type nodeTerms struct {
	Policy, Links, NUMA float64
	HasLinks, HasNUMA   bool
}

// nodeScoreOf combines the terms with the pod's weights, topologyWeight being the
// plugin's weight of links. Under the topology node policy the link quality is the
// policy's own score, and is not counted twice. Without weights this is the score as
// it always was: policy + topologyWeight × links, or links alone under topology.
func nodeScoreOf(t nodeTerms, w *api.ScoreWeights, nodePolicy api.Policy, topologyWeight float64) float64 {
	if t.HasLinks && nodePolicy == api.PolicyTopology {
		t.Policy, t.HasLinks = t.Links, false
	}
	score := w.Of(api.TermPolicy, 1) * t.Policy
	if t.HasLinks {
		score += w.Of(api.TermTopology, topologyWeight) * t.Links
	}
	if t.HasNUMA {
		score += w.Of(api.TermNUMA, 0) * t.NUMA
	}
	return score
}

// numaGrade is the 0..100 NUMA locality of a card set: the share of its pairs whose
// two cards sit on one known NUMA node.
func numaGrade(n *Node, set []int) float64 {
	same, pairs := 0, 0
	for a := 0; a < len(set); a++ {
		for b := a + 1; b < len(set); b++ {
			pairs++
			if v := n.Cards[set[a]].NUMA; v >= 0 && v == n.Cards[set[b]].NUMA {
				same++
			}
		}
	}
	if pairs == 0 {
		return 0
	}
	return 100 * float64(same) / float64(pairs)
}

// weighed is n as card choice sees it for a pod weighing links by link and the NUMA
// bonus by numa: the same cards, the pair weights scaled. n itself when both are 1.
func (n *Node) weighed(link, numa float64) *Node {
	t := n.topo.weighed(link, numa)
	if t == n.topo {
		return n
	}
	v := *n
	v.topo = t
	return &v
}

// weighed is t with every pair's link score × link and its NUMA bonus × numa; the
// bare link scores, which grade nodes, stay as they are. t itself when both are 1.
func (t *topology) weighed(link, numa float64) *topology {
	if t == nil || link == 1 && numa == 1 {
		return t
	}
	w := &topology{n: t.n, w: make([]float64, len(t.w)), link: t.link}
	for i, pair := range t.w {
		bare := float64(t.link[i])
		w.w[i] = link*bare + numa*(pair-bare)
	}
	return w
}
