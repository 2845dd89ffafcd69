package placement

import (
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// BenchmarkScorePod is the predicate's per-node cost for the scheduler session
// benchmark's three request shapes on a half-used 8-card node, with and without a
// link matrix.
func BenchmarkScorePod(b *testing.B) {
	reqs := map[string]*Request{
		"2 cards shared": req(api.PolicyBinpack, api.ContainerRequest{Name: "c", Cards: 2, MemoryMiB: 20000, Cores: 50}),
		"1 card whole":   req(api.PolicyBinpack, api.ContainerRequest{Name: "c", Cards: 1, MemoryPercent: 100, Cores: 100}),
		"1 card shared":  req(api.PolicyBinpack, api.ContainerRequest{Name: "c", Cards: 1, MemoryMiB: 10000, Cores: 25}),
		// Refusals, which a busy cluster answers far more often than fits: four of the
		// cards are shared, so five whole ones are not free; no card is an H100.
		"refused 5 cards whole": req(api.PolicyBinpack, api.ContainerRequest{Name: "c", Cards: 5, MemoryPercent: 100, Cores: 100}),
		"refused type filter":   typed(req(api.PolicyBinpack, api.ContainerRequest{Name: "c", Cards: 1, MemoryMiB: 10000, Cores: 25}), "H100"),
	}
	cards := healthy(8)
	for i := range cards {
		cards[i].NUMA = i / 4
	}
	nodes := map[string]*Node{"no links": testNode(cards...)}
	if linked := benchLinked(cards); linked != nil {
		nodes["links"] = linked
	}
	for nn, n := range nodes {
		for i := 0; i < 4; i++ {
			n.Cards[i].Used = Usage{MemoryMiB: 20000, Cores: 50, Tenants: 1}
		}
		for rn, r := range reqs {
			b.Run(nn+"/"+rn, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					ScorePod(n, r)
				}
			})
		}
	}
}

func typed(r *Request, model string) *Request {
	r.Options.TypeInclude = []string{model}
	return r
}
