package placement

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// A pod without score weights is placed and scored exactly as before weights existed.
// testdata/unweighted.golden holds what the engine of commit b549b90, the last
// without them, answered on random nodes for random pods: every node's score (to the
// last bit) and the cards it chose, or the refusal. The generator uses only what that
// engine had, so the same file can be written by either; rewrite it (-update) only
// for a change of scoring that is meant.
var updateGolden = flag.Bool("update", false, "rewrite testdata/unweighted.golden from this engine")

func TestUnweightedPodsScoreEveryNodeAsBefore(t *testing.T) {
	got := unweightedAnswers()
	path := filepath.Join("testdata", "unweighted.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, have := strings.Split(string(raw), "\n"), strings.Split(got, "\n")
	if len(want) != len(have) {
		t.Fatalf("%d answers, the golden file has %d", len(have), len(want))
	}
	bad := 0
	for i := range want {
		if want[i] != have[i] {
			if bad++; bad <= 5 {
				t.Errorf("answer %d: %q, before %q", i, have[i], want[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d answers differ from before", bad, len(want))
	}
}

// unweightedAnswers places a random pod on each node of 150 random clusters of six
// nodes, with FitPod and ScorePod, and writes one line per node.
func unweightedAnswers() string {
	rng := rand.New(rand.NewPCG(2026, 5))
	var b strings.Builder
	for cluster := 0; cluster < 150; cluster++ {
		req := goldenRequest(rng)
		for i := 0; i < 6; i++ {
			n := goldenNode(rng, fmt.Sprintf("c%d-n%d", cluster, i))
			f, ferr := FitPod(n, req)
			score, serr := ScorePod(n, req)
			switch {
			case ferr != nil && serr != nil:
				fmt.Fprintf(&b, "%s refused %d/%d %s\n", n.Name, ferr.Fitting, ferr.Wanted, ferr.Dominant())
			case ferr != nil || serr != nil || score != f.Score:
				fmt.Fprintf(&b, "%s FitPod and ScorePod disagree: %v %v %v\n", n.Name, ferr, serr, score)
			default:
				var sets []string
				for _, c := range f.Containers {
					var ids []string
					for _, a := range c.Cards {
						ids = append(ids, strings.TrimPrefix(a.UUID, "GPU-"))
					}
					sets = append(sets, strings.Join(ids, ","))
				}
				fmt.Fprintf(&b, "%s %s %s\n", n.Name, strconv.FormatFloat(f.Score, 'g', -1, 64), strings.Join(sets, ";"))
			}
		}
	}
	return b.String()
}

// goldenRequest is a random pod: one or two containers, policies, QoS, NUMA binding,
// the plugin's topology weight and a gang size, never weights.
func goldenRequest(rng *rand.Rand) *Request {
	policies := []api.Policy{api.PolicyBinpack, api.PolicySpread, api.PolicyTopology}
	r := &Request{
		CardPolicy:     policies[rng.IntN(3)],
		NodePolicy:     policies[rng.IntN(3)],
		TopologyWeight: []float64{0, 0.5, 1, 3}[rng.IntN(4)],
		GangSize:       []int{1, 1, 4}[rng.IntN(3)],
		Options: api.PodOptions{QoS: []api.QoSClass{api.QoSFixedShare, api.QoSBurstShare, api.QoSBestEffort}[rng.IntN(3)],
			NUMABind: rng.IntN(5) == 0},
	}
	for i := 0; i < 1+rng.IntN(2); i++ {
		c := api.ContainerRequest{Name: fmt.Sprintf("c%d", i), Cards: 1 + rng.IntN(3), Cores: []int{0, 10, 25, 50, 100}[rng.IntN(5)]}
		if rng.IntN(2) == 0 {
			c.MemoryMiB = int64(1 + rng.IntN(12000))
		} else {
			c.MemoryPercent = 1 + rng.IntN(40)
		}
		r.Containers = append(r.Containers, c)
	}
	return r
}

// goldenNode is a random node: 2..8 cards of mixed sizes and NUMA nodes, a random link
// matrix on half of them, and random tenants already on the cards.
func goldenNode(rng *rand.Rand, name string) *Node {
	k := 2 + rng.IntN(7)
	inv := &api.NodeInventory{Version: api.InventoryVersion}
	for i := 0; i < k; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "NVIDIA A100",
			MemoryMiB: []int64{16384, 40960, 81920}[rng.IntN(3)], NUMA: rng.IntN(3) - 1, Shares: 1 + rng.IntN(10),
			Healthy: rng.IntN(10) > 0})
	}
	if k > 1 && rng.IntN(2) == 0 {
		links := []api.LinkType{"NV1", "NV2", "NV12", api.LinkSameBoard, api.LinkPCIeSingle, api.LinkPCIeMulti,
			api.LinkHostBridge, api.LinkSameNUMA, api.LinkCrossNUMA}
		inv.Links = make([][]api.LinkType, k)
		for i := range inv.Links {
			inv.Links[i] = make([]api.LinkType, k)
			inv.Links[i][i] = api.LinkSelf
		}
		for i := 0; i < k; i++ {
			for j := i + 1; j < k; j++ {
				l := links[rng.IntN(len(links))]
				inv.Links[i][j], inv.Links[j][i] = l, l
			}
		}
	}
	n := NewNode(name, inv, []float64{1, 1, 1.5}[rng.IntN(3)])
	for i := range n.Cards {
		c := &n.Cards[i]
		if tenants := rng.IntN(min(c.Shares, 2) + 1); tenants > 0 && c.Healthy && rng.IntN(2) == 0 {
			c.Used.Tenants = tenants
			c.Used.MemoryMiB = rng.Int64N(c.CapacityMiB/2 + 1)
			c.Used.Cores = []int{0, 10, 30, 60, 100}[rng.IntN(5)]
			if c.Used.Cores < 100 {
				c.Used.Classes[rng.IntN(3)] = int32(tenants)
			}
		}
	}
	return n
}
