package topology

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

var linkPool = []api.LinkType{"NV1", "NV2", "NV4", "NV12", api.LinkSameBoard, api.LinkPCIeSingle,
	api.LinkPCIeMulti, api.LinkHostBridge, api.LinkSameNUMA, api.LinkCrossNUMA, api.LinkCrossNUMA}

// scenario is a random node with some cards taken: where the allocators can
// disagree, unlike on idle fixtures.
type scenario struct {
	inv  *api.NodeInventory
	free []int
}

func scenarios(seed int64, cards, free, n int) []scenario {
	rng := rand.New(rand.NewSource(seed))
	out := make([]scenario, n)
	for s := range out {
		links := make(map[[2]int]api.LinkType)
		for i := 0; i < cards; i++ {
			for j := i + 1; j < cards; j++ {
				links[[2]int{i, j}] = linkPool[rng.Intn(len(linkPool))]
			}
		}
		inv := inventory(cards, func(i, j int) api.LinkType { return links[[2]int{i, j}] })
		out[s] = scenario{inv: inv, free: rng.Perm(cards)[:free]}
		sort.Ints(out[s].free)
	}
	return out
}

// BenchmarkRandomNodes runs both allocators on the same random, partly used nodes
// and reports the mean link score of their choices next to the best link score any
// k-set of the free cards has (found by brute force), so quality reads as a share
// of the optimum. Tessera's objective also weighs fragmentation and NUMA, so it may
// give up a little link score to keep the remaining cards together.
func BenchmarkRandomNodes(b *testing.B) {
	for _, tc := range []struct{ cards, free, k int }{{8, 6, 2}, {8, 6, 3}, {8, 8, 4}, {16, 10, 2}, {16, 10, 4}, {16, 12, 6}} {
		sc := scenarios(int64(tc.cards*100+tc.k), tc.cards, tc.free, 20)
		var optimum float64
		for _, s := range sc {
			optimum += float64(bestLinkTotal(s.inv.Links, s.free, tc.k))
		}
		optimum /= float64(len(sc))
		name := fmt.Sprintf("%dcards/%dfree/k=%d", tc.cards, tc.free, tc.k)
		b.Run(name+"/tessera", func(b *testing.B) {
			nodes := make([]*placement.Node, len(sc))
			for i, s := range sc {
				nodes[i] = placement.NewNode("n", s.inv, 1)
			}
			var total float64
			for i := 0; i < b.N; i++ {
				s := i % len(sc)
				set, _ := nodes[s].PreferredCards(sc[s].free, nil, tc.k)
				total += float64(placement.LinkTotal(sc[s].inv.Links, set))
			}
			report(b, total/float64(b.N), optimum)
		})
		b.Run(name+"/go-gpuallocator", func(b *testing.B) {
			devs := make([][]*gpuallocator.Device, len(sc))
			for i, s := range sc {
				all := gpuDevices(s.inv)
				for _, f := range s.free {
					devs[i] = append(devs[i], all[f])
				}
			}
			policy := gpuallocator.NewBestEffortPolicy()
			var total float64
			for i := 0; i < b.N; i++ {
				s := i % len(sc)
				set := indices(policy.Allocate(devs[s], nil, tc.k))
				total += float64(placement.LinkTotal(sc[s].inv.Links, set))
			}
			report(b, total/float64(b.N), optimum)
		})
	}
}

func report(b *testing.B, mean, optimum float64) {
	b.ReportMetric(mean, "link-score")
	b.ReportMetric(100*mean/optimum, "%-of-best")
}

// bestLinkTotal is the highest link score of any k-subset of free.
func bestLinkTotal(links [][]api.LinkType, free []int, k int) int {
	best := 0
	set := make([]int, 0, k)
	var rec func(from int)
	rec = func(from int) {
		if len(set) == k {
			best = max(best, placement.LinkTotal(links, set))
			return
		}
		for p := from; p <= len(free)-(k-len(set)); p++ {
			set = append(set, free[p])
			rec(p + 1)
			set = set[:len(set)-1]
		}
	}
	rec(0)
	return best
}
