package placement

import (
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/api"
)

var linkPool = []api.LinkType{"NV1", "NV2", "NV4", "NV6", "NV12", api.LinkSameBoard, api.LinkPCIeSingle,
	api.LinkPCIeMulti, api.LinkHostBridge, api.LinkSameNUMA, api.LinkCrossNUMA, api.LinkCrossNUMA}

// randomTopology draws a node of m cards: random links, some NUMA unknown, and
// random policy scores per card.
func randomTopology(rng *rand.Rand, m int) (*topology, []int, []float64) {
	inv, cands, u := randomInventory(rng, m)
	return newTopology(inv), cands, u
}

func randomInventory(rng *rand.Rand, m int) (*api.NodeInventory, []int, []float64) {
	links := make([]api.LinkType, m*m)
	for i := 0; i < m; i++ {
		for j := i + 1; j < m; j++ {
			l := linkPool[rng.Intn(len(linkPool))]
			links[i*m+j], links[j*m+i] = l, l
		}
	}
	inv := inventory(m, func(i int) int { return rng.Intn(3) - 1 }, func(i, j int) api.LinkType { return links[i*m+j] })
	cands := make([]int, m)
	u := make([]float64, m)
	for i := range cands {
		cands[i], u[i] = i, float64(rng.Intn(101))
	}
	return inv, cands, u
}

// objective is the search objective written as its definition, independently of
// the quadratic form the search uses.
func objective(t *topology, cands []int, u []float64, set []int) float64 {
	in := map[int]bool{}
	for _, i := range set {
		in[i] = true
	}
	var q, unary, cut float64
	for a, i := range set {
		unary += policyWeight * u[i]
		for _, j := range set[a+1:] {
			q += t.pair(i, j)
		}
		for _, j := range cands {
			if !in[j] {
				cut += t.pair(i, j)
			}
		}
	}
	return q + unary - fragmentationWeight*cut
}

// bruteForce returns the best and worst objective over every k-subset.
func bruteForce(t *topology, cands []int, u []float64, k int) (best, worst float64) {
	first := true
	set := make([]int, 0, k)
	var rec func(from int)
	rec = func(from int) {
		if len(set) == k {
			v := objective(t, cands, u, set)
			if first || v > best {
				best = v
			}
			if first || v < worst {
				worst = v
			}
			first = false
			return
		}
		for p := from; p <= len(cands)-(k-len(set)); p++ {
			set = append(set, cands[p])
			rec(p + 1)
			set = set[:len(set)-1]
		}
	}
	rec(0)
	return best, worst
}

func TestExactSearchMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for round := 0; round < 300; round++ {
		m := 2 + rng.Intn(11)
		k := 1 + rng.Intn(m)
		tp, cands, u := randomTopology(rng, m)
		var s search
		s.init(tp, cands, u, nil, k)
		out := make([]int, k)
		got := s.run(out)
		best, _ := bruteForce(tp, cands, u, k)
		if def := objective(tp, cands, u, out); abs(def-got) > 1e-6 || abs(def-best) > 1e-6 {
			t.Fatalf("round %d (%d of %d cards): search reports %.4f for %v (%.4f by definition), brute force finds %.4f",
				round, k, m, got, out, def, best)
		}
	}
}

// The heuristic serves nodes too large to enumerate; on 16 cards, where brute force
// is still affordable, it must land within 2% of the optimum, measured on the gap
// between the worst and the best set so that no constant shift flatters it.
func TestHeuristicIsWithinTwoPercentOfOptimum(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	var sum, worstRatio float64 = 0, 1
	runs := 0
	for round := 0; round < 60; round++ {
		m := 12 + rng.Intn(5)
		k := 2 + rng.Intn(m-3)
		tp, cands, u := randomTopology(rng, m)
		var s search
		s.init(tp, cands, u, nil, k)
		s.descend()
		out := make([]int, k)
		s.write(out)
		best, worst := bruteForce(tp, cands, u, k)
		ratio := 1.0
		if best-worst > eps {
			ratio = (objective(tp, cands, u, out) - worst) / (best - worst)
		}
		sum += ratio
		runs++
		worstRatio = min(worstRatio, ratio)
		if ratio < 0.98 {
			t.Errorf("round %d (%d of %d cards): heuristic at %.4f of the optimum", round, k, m, ratio)
		}
	}
	t.Logf("heuristic quality over %d random nodes: mean %.5f, worst %.5f of the brute-force optimum", runs, sum/float64(runs), worstRatio)
}

func TestMustIncludeCardsAreKept(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for round := 0; round < 100; round++ {
		m := 4 + rng.Intn(20)
		k := 2 + rng.Intn(m-2)
		tp, cands, _ := randomTopology(rng, m)
		must := []int{rng.Intn(m)}
		var s search
		s.init(tp, cands, nil, must, k)
		out := make([]int, k)
		s.run(out)
		if !slices.Contains(out, must[0]) || !sort.IntsAreSorted(out) || distinct(out) != k {
			t.Fatalf("round %d: %v does not hold must-include card %d as a sorted set of %d", round, out, must[0], k)
		}
	}
}

func distinct(v []int) int {
	m := map[int]bool{}
	for _, x := range v {
		m[x] = true
	}
	return len(m)
}

// The budgets of issue 6: 8 cards under 1 ms, 16 cards under 10 ms at p99.
// BenchmarkSearchLatency reports the p50 and p99 of one search over every request
// size on random 8- and 16-card nodes, the figures issue 6 budgets (8 cards under
// 1 ms, 16 cards under 10 ms p99). A benchmark, not a timed test: the numbers are
// read and compared, never asserted on a shared machine.
func BenchmarkSearchLatency(b *testing.B) {
	for _, cards := range []int{8, 16} {
		b.Run(itoa(int64(cards))+"cards", func(b *testing.B) {
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				rng := rand.New(rand.NewSource(int64(cards)))
				for round := 0; round < 40; round++ {
					tp, cands, u := randomTopology(rng, cards)
					for k := 1; k <= cards; k++ {
						out := make([]int, k)
						start := time.Now()
						var s search
						s.init(tp, cands, u, nil, k)
						s.run(out)
						times = append(times, time.Since(start))
					}
				}
			}
			sort.Slice(times, func(a, c int) bool { return times[a] < times[c] })
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

func BenchmarkSearch(b *testing.B) {
	for _, m := range []int{16, 24, 32} {
		rng := rand.New(rand.NewSource(1))
		tp, cands, u := randomTopology(rng, m)
		for _, k := range []int{1, 2, m / 4, m / 2, m} {
			b.Run(itoa(int64(m))+"cards/k="+itoa(int64(k)), func(b *testing.B) {
				out := make([]int, k)
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					var s search
					s.init(tp, cands, u, nil, k)
					s.run(out)
				}
			})
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func BenchmarkFixtureSearch(b *testing.B) {
	for name, inv := range map[string]*api.NodeInventory{"two-socket-16": TwoSocket16(), "nvswitch-16": NVSwitch16(), "dgx-1": DGX1()} {
		n := NewNode(name, inv, 1)
		free := make([]int, len(inv.Cards))
		for i := range free {
			free[i] = i
		}
		for _, k := range []int{2, 3, len(free) / 2} {
			b.Run(name+"/k="+itoa(int64(k)), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					n.PreferredCards(free, nil, k)
				}
			})
		}
	}
}
