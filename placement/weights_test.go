package placement

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

func weights(t *testing.T, v string) api.ScoreWeights {
	t.Helper()
	w, err := api.ParseScoreWeights(v)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestNodeScoreOfWeighsTheTerms(t *testing.T) {
	all := nodeTerms{Policy: 40, Links: 90, HasLinks: true, NUMA: 50, HasNUMA: true}
	for _, tc := range []struct {
		name    string
		terms   nodeTerms
		weights string
		policy  api.Policy
		tw      float64
		want    float64
	}{
		{"without weights: policy plus the plugin's topology weight × links", all, "", api.PolicyBinpack, 2, 40 + 2*90},
		{"without weights the NUMA term counts nothing", nodeTerms{Policy: 40, NUMA: 100, HasNUMA: true}, "", api.PolicyBinpack, 1, 40},
		{"without weights under the topology policy: the links alone", all, "", api.PolicyTopology, 1, 90},
		{"the topology policy without links is the policy's score", nodeTerms{Policy: 40}, "", api.PolicyTopology, 1, 40},
		{"each named term replaces its default", all, "policy=3,topology=0.5,numa=1", api.PolicyBinpack, 2, 3*40 + 0.5*90 + 50},
		{"an unnamed topology keeps the plugin's", all, "numa=2", api.PolicySpread, 2, 40 + 2*90 + 2*50},
		{"under the topology policy, policy weighs the links and topology is not added", all, "policy=2,topology=5", api.PolicyTopology, 1, 2 * 90},
		{"terms the pod does not have count nothing", nodeTerms{Policy: 40}, "topology=3,numa=3", api.PolicyBinpack, 1, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w api.ScoreWeights
			if tc.weights != "" {
				w = weights(t, tc.weights)
			}
			if got := nodeScoreOf(tc.terms, &w, tc.policy, tc.tw); got != tc.want {
				t.Fatalf("score %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNUMAGradeCountsPairsOnOneNode(t *testing.T) {
	n := testNode(api.Card{Healthy: true, NUMA: 0}, api.Card{Healthy: true, NUMA: 0}, api.Card{Healthy: true, NUMA: 1},
		api.Card{Healthy: true, NUMA: 1}, api.Card{Healthy: true, NUMA: -1}, api.Card{Healthy: true, NUMA: -1})
	for _, tc := range []struct {
		set  []int
		want float64
	}{
		{[]int{0, 1}, 100}, {[]int{0, 2}, 0}, {[]int{0, 1, 2, 3}, 100 * 2.0 / 6}, {[]int{4, 5}, 0}, {[]int{0}, 0},
	} {
		if got := numaGrade(n, tc.set); got != tc.want {
			t.Errorf("numaGrade(%v) = %v, want %v", tc.set, got, tc.want)
		}
	}
}

func TestWeighedTopologyScalesLinksAndTheNUMABonus(t *testing.T) {
	n := NewNode("pcie", PCIePairs4(), 1)
	if n.weighed(1, 1) != n {
		t.Fatal("weights of 1 must leave the node's own pair weights")
	}
	v := n.weighed(2, 0)
	// Cards 0 and 1: one PCIe switch (50) on one NUMA node (bonus 5); 0 and 2: across CPUs (10).
	if got := v.topo.pair(0, 1); got != 100 {
		t.Errorf("pair(0,1) = %v, want 2×50 + 0×5", got)
	}
	if got := v.topo.pair(0, 2); got != 20 {
		t.Errorf("pair(0,2) = %v, want 2×10", got)
	}
	if n.topo.pair(0, 1) != 55 || v.topo.setGrade([]int{0, 1}) != n.topo.setGrade([]int{0, 1}) {
		t.Error("weighing changed the node's own weights or the link grade nodes are scored by")
	}
}

// Weights change which cards and nodes win, as documented in weights.go.
func TestWeightsChangeTheWinner(t *testing.T) {
	two := func(w string) *Request {
		r := req(api.PolicyBinpack, api.ContainerRequest{Cards: 2, MemoryMiB: 10000, Cores: 25})
		r.TopologyWeight = 1
		if w != "" {
			r.Options.Weights = weights(t, w)
		}
		return r
	}
	// Cards 0 and 1 are an idle NVLink pair, 2 and 3 a half-used PCIe pair.
	linked := func() *Node {
		inv := inventory(4, halves(4), func(i, j int) api.LinkType {
			switch {
			case i == 0 && j == 1:
				return "NV12"
			case i/2 == j/2:
				return api.LinkPCIeSingle
			}
			return api.LinkCrossNUMA
		})
		n := NewNode("linked", inv, 1)
		for _, i := range []int{2, 3} {
			n.Cards[i].Used = Usage{MemoryMiB: 40000, Cores: 50, Tenants: 1}
		}
		return n
	}
	if got := chosen(t, linked(), two("")); got != "[0 1]" {
		t.Errorf("without weights the NVLink pair wins, got %s", got)
	}
	if got := chosen(t, linked(), two("topology=0")); got != "[2 3]" {
		t.Errorf("topology=0: binpack's fuller pair wins, got %s", got)
	}
	// No link matrix; cards 1 and 2 are fullest, on different NUMA nodes.
	split := func() *Node {
		n := testNode(api.Card{Healthy: true, NUMA: 0}, api.Card{Healthy: true, NUMA: 0}, api.Card{Healthy: true, NUMA: 1},
			api.Card{Healthy: true, NUMA: 1})
		n.Cards[1].Used = Usage{MemoryMiB: 20000, Cores: 50, Tenants: 1}
		n.Cards[2].Used = Usage{MemoryMiB: 20000, Cores: 50, Tenants: 1}
		return n
	}
	if got := chosen(t, split(), two("")); got != "[a b]" && got != "[c d]" {
		t.Errorf("without weights a one-NUMA pair wins, got %s", got)
	}
	if got := chosen(t, split(), two("numa=0")); got != "[b c]" {
		t.Errorf("numa=0: the two fullest cards win across NUMA nodes, got %s", got)
	}
	// Node score: a half-full node whose free cards sit on two NUMA nodes against an
	// idle node whose cards share one.
	full := testNode(api.Card{Healthy: true, NUMA: 0}, api.Card{Healthy: true, NUMA: 1})
	for i := range full.Cards {
		full.Cards[i].Used = Usage{MemoryMiB: 20000, Cores: 50, Tenants: 1}
	}
	idle := testNode(api.Card{Healthy: true, NUMA: 0}, api.Card{Healthy: true, NUMA: 0})
	for _, tc := range []struct {
		weights  string
		fullWins bool
	}{{"", true}, {"numa=1", false}, {"policy=0,numa=0.1", false}} {
		a, errA := ScorePod(full, two(tc.weights))
		b, errB := ScorePod(idle, two(tc.weights))
		if errA != nil || errB != nil || (a > b) != tc.fullWins {
			t.Errorf("weights %q: full node %v, idle one-NUMA node %v (%v %v); want the full node to win: %v", tc.weights, a, b, errA, errB, tc.fullWins)
		}
	}
}

// Naming a weight at the value it has without the annotation changes nothing: the
// weighted paths reproduce the unweighted placement on random nodes and pods.
func TestDefaultWeightsNamedPlaceAsUnnamed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	w := weights(t, "policy=1,topology=1")
	for i := 0; i < 600; i++ {
		r := goldenRequest(rng)
		r.TopologyWeight = 1
		n := goldenNode(rng, "n")
		named := *r
		named.Options.Weights = w
		f, ferr := FitPod(n, r)
		g, gerr := FitPod(n, &named)
		if (ferr == nil) != (gerr == nil) || ferr == nil && !reflect.DeepEqual(f, g) {
			t.Fatalf("case %d: unnamed %+v %v, named %+v %v", i, f, ferr, g, gerr)
		}
	}
}
