package placement

// The k-set search. For candidate cards F and a chosen set S ⊆ F of k cards the
// objective is
//
//	Q(S) + Σ_{i∈S} u(i) − λ·cut(S, F∖S)
//
// where Q(S) sums the pair weights inside S (link quality of the job), u is the
// card policy's tie-break and cut sums the weights from S to the cards left free:
// the connection the remaining cards lose, the fragmentation a choice causes.
// With d(i) the weight from i to all of F, cut(S) = Σ_{i∈S} d(i) − 2·Q(S), so the
// objective is the quadratic
//
//	(1+2λ)·Q(S) + Σ_{i∈S} (u(i) − λ·d(i))
//
// a maximum-weight k-subgraph problem: NP-hard in general, but nodes have at most
// a few dozen cards. Up to exactLimit subsets it is enumerated exactly, which
// covers every k on 16 cards; beyond, a multi-start greedy with swap descent runs.

// exactLimit is the number of k-subsets enumerated exactly: C(16,8) = 12870 and
// C(18,9) = 48620 fit, so every node on the market gets the optimum.
const exactLimit = 50000

// eps separates real improvements from floating-point noise, so ties keep the
// first (lexicographically smallest) set and results stay deterministic.
const eps = 1e-9

// search holds one k-set search's state in fixed arrays, so that a search on the
// scheduler's hot path allocates nothing.
type search struct {
	t     *topology
	m, k  int
	c     float64
	cands [maxTopologyCards]int     // node card index per position
	unary [maxTopologyCards]float64 // u(i) − λ·d(i) per position
	fixed [maxTopologyCards]bool    // positions that must be chosen
	nfix  int
	// left[p] counts the unfixed positions from p on, for pruning.
	left [maxTopologyCards + 1]int
	// conn[p] is the pair weight from p to the positions chosen so far.
	conn [maxTopologyCards]float64
	// maxRow[p] is p's best pair weight to any candidate, for the bound.
	maxRow [maxTopologyCards]float64
	cur    [maxTopologyCards]int
	best   [maxTopologyCards]int
	value  float64
	found  bool
}

// init prepares a search for k of cands (node card indices, ascending) with
// per-candidate policy scores u (nil for none) and must-include cards must.
func (s *search) init(t *topology, cands []int, u []float64, must []int, k int) {
	s.t, s.m, s.k, s.c = t, len(cands), k, 1+2*fragmentationWeight
	s.nfix, s.found = 0, false
	copy(s.cands[:], cands)
	for p, i := range cands {
		var d, top float64
		for _, j := range cands {
			d += t.pair(i, j)
			top = max(top, t.pair(i, j))
		}
		s.maxRow[p], s.conn[p] = top, 0
		s.unary[p] = -fragmentationWeight * d
		if u != nil {
			s.unary[p] += policyWeight * u[p]
		}
		s.fixed[p] = false
		for _, x := range must {
			if x == i {
				s.fixed[p] = true
				s.cur[s.nfix] = p
				s.nfix++
			}
		}
	}
	s.left[s.m] = 0
	for p := s.m - 1; p >= 0; p-- {
		s.left[p] = s.left[p+1]
		if !s.fixed[p] {
			s.left[p]++
		}
	}
}

// gain is what adding position p to the first depth positions of cur adds.
func (s *search) gain(p, depth int) float64 {
	g := s.unary[p]
	i := s.cands[p]
	for q := 0; q < depth; q++ {
		g += s.c * s.t.pair(i, s.cands[s.cur[q]])
	}
	return g
}

// run finds the best set and writes its node card indices, ascending, into out.
func (s *search) run(out []int) float64 {
	if s.nfix > s.k {
		return 0
	}
	var val float64
	for d := 0; d < s.nfix; d++ {
		val += s.gain(s.cur[d], d)
		s.link(s.cur[d], 1)
	}
	if binomial(s.m-s.nfix, s.k-s.nfix) <= exactLimit {
		s.exact(0, s.nfix, val)
	} else {
		s.descend()
	}
	s.write(out)
	return s.value
}

func (s *search) write(out []int) {
	var chosen [maxTopologyCards]bool
	for _, p := range s.best[:s.k] {
		chosen[p] = true
	}
	n := 0
	for p := 0; p < s.m; p++ {
		if chosen[p] {
			out[n] = s.cands[p]
			n++
		}
	}
}

// link adds (sign 1) or removes (sign -1) position p to or from conn.
func (s *search) link(p int, sign float64) {
	i := s.cands[p]
	for q := 0; q < s.m; q++ {
		s.conn[q] += sign * s.t.pair(s.cands[q], i)
	}
}

// exact enumerates the sets in lexicographic order of positions, branch and
// bound: a branch is cut when even its upper bound cannot beat the best set
// strictly, so the first optimal set in that order is the one returned.
func (s *search) exact(from, depth int, val float64) {
	if depth == s.k {
		if !s.found || val > s.value+eps {
			s.found, s.value = true, val
			copy(s.best[:s.k], s.cur[:s.k])
		}
		return
	}
	need := s.k - depth
	if s.found && val+s.bound(from, need) <= s.value+eps {
		return
	}
	for p := from; p < s.m; p++ {
		if s.fixed[p] {
			continue
		}
		if s.left[p] < need {
			return
		}
		g := s.unary[p] + s.c*s.conn[p]
		s.cur[depth] = p
		s.link(p, 1)
		s.exact(p+1, depth+1, val+g)
		s.link(p, -1)
	}
}

// bound is at least what need more positions from `from` on can add: each
// position's own gain to the chosen set plus its share of the pairs among the new
// ones, each pair costed at most the mean of its ends' best weights.
func (s *search) bound(from, need int) float64 {
	var top [maxTopologyCards]float64 // the need largest, descending
	n := 0
	for q := from; q < s.m; q++ {
		if !s.fixed[q] {
			n = keepLargest(&top, n, need, s.unary[q]+s.c*(s.conn[q]+float64(need-1)*s.maxRow[q]/2))
		}
	}
	return sumOf(top[:n])
}

// descend is the heuristic for sets too many to enumerate: from every seed card,
// grow greedily by the best gain, then swap a chosen card for an unchosen one
// while that improves the objective.
func (s *search) descend() {
	var chosen [maxTopologyCards]bool
	var linked [maxTopologyCards]float64 // Σ pair weight to the current set
	account := func(p int, sign float64) {
		for q := 0; q < s.m; q++ {
			linked[q] += sign * s.t.pair(s.cands[q], s.cands[p])
		}
	}
	for seed := 0; seed < s.m; seed++ {
		if s.fixed[seed] && s.nfix > 0 {
			continue
		}
		chosen, linked = [maxTopologyCards]bool{}, [maxTopologyCards]float64{}
		size := 0
		for p := 0; p < s.m; p++ {
			if s.fixed[p] {
				chosen[p] = true
				account(p, 1)
				size++
			}
		}
		if size < s.k && !chosen[seed] {
			chosen[seed] = true
			account(seed, 1)
			size++
		}
		// Grow greedily: add the card that gains the most with the set so far.
		for ; size < s.k; size++ {
			best, bestGain := -1, 0.0
			for p := 0; p < s.m; p++ {
				if gain := s.unary[p] + s.c*linked[p]; !chosen[p] && (best < 0 || gain > bestGain+eps) {
					best, bestGain = p, gain
				}
			}
			chosen[best] = true
			account(best, 1)
		}
		// Improve by swaps: drop a chosen card for an unchosen one while that gains.
		for round := 0; round < 4*s.k; round++ {
			drop, take, bestGain := -1, -1, eps
			for i := 0; i < s.m; i++ {
				if !chosen[i] || s.fixed[i] {
					continue
				}
				kept := s.unary[i] + s.c*linked[i]
				for j := 0; j < s.m; j++ {
					if chosen[j] {
						continue
					}
					if gain := s.unary[j] + s.c*(linked[j]-s.t.pair(s.cands[j], s.cands[i])) - kept; gain > bestGain {
						drop, take, bestGain = i, j, gain
					}
				}
			}
			if drop < 0 {
				break
			}
			chosen[drop], chosen[take] = false, true
			account(drop, -1)
			account(take, 1)
		}
		var value float64
		n := 0
		for p := 0; p < s.m; p++ {
			if chosen[p] {
				value += s.unary[p] + s.c*linked[p]/2
				s.cur[n] = p
				n++
			}
		}
		if !s.found || value > s.value+eps {
			s.found, s.value = true, value
			copy(s.best[:s.k], s.cur[:s.k])
		}
	}
}

// binomial is C(n, k), saturating well above exactLimit.
func binomial(n, k int) int {
	if k < 0 || k > n {
		return 0
	}
	k = min(k, n-k)
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > 1<<40 {
			return 1 << 40
		}
	}
	return r
}
