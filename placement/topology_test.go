package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// wholeCards asks for k exclusive cards in one container.
func wholeCards(k int, opts api.PodOptions, p api.Policy) *Request {
	r := req(p, api.ContainerRequest{Name: "train", Cards: k, MemoryPercent: 100, Cores: 100})
	r.Options = opts
	return r
}

// busy marks cards as held by an exclusive tenant.
func busy(n *Node, cards ...int) *Node {
	for _, i := range cards {
		n.Cards[i].Used = Usage{MemoryMiB: n.Cards[i].CapacityMiB, Cores: 100, Tenants: 1}
	}
	return n
}

func chosen(t *testing.T, n *Node, r *Request) string {
	t.Helper()
	f, err := FitPod(n, r)
	if err != nil {
		t.Fatalf("unexpected refusal: %s", err.Detail())
	}
	var idx []string
	for _, c := range f.Containers[0].Cards {
		idx = append(idx, strings.TrimPrefix(c.UUID, "GPU-"))
	}
	return "[" + strings.Join(idx, " ") + "]"
}

func TestTopologyFixturesChooseExpectedSets(t *testing.T) {
	for _, tc := range []struct {
		name string
		inv  *api.NodeInventory
		busy []int
		k    int
		want string
	}{
		{"DGX A100 gives one card the first card", DGXA100(), nil, 1, "[0]"},
		{"DGX A100 keeps a pair on one NUMA node", DGXA100(), nil, 2, "[0 1]"},
		{"DGX A100 keeps four cards on one NUMA node", DGXA100(), nil, 4, "[0 1 2 3]"},
		{"DGX A100 fills the other NUMA node when the first is taken", DGXA100(), []int{0}, 4, "[4 5 6 7]"},
		{"DGX A100 gives eight cards the whole node", DGXA100(), nil, 8, "[0 1 2 3 4 5 6 7]"},
		{"DGX-1 gives a pair a double NVLink on one CPU", DGX1(), nil, 2, "[0 3]"},
		{"DGX-1 gives three cards the best-linked triangle", DGX1(), nil, 3, "[0 2 3]"},
		{"DGX-1 gives four cards a fully linked quad", DGX1(), nil, 4, "[0 1 2 3]"},
		{"DGX-1 gives four cards the other quad when one card is taken", DGX1(), []int{1}, 4, "[4 5 6 7]"},
		{"DGX-1 finds a double NVLink pair beside a busy card", DGX1(), []int{0, 3}, 2, "[1 2]"},
		{"DGX-1 gives eight cards the whole node", DGX1(), nil, 8, "[0 1 2 3 4 5 6 7]"},
		{"PCIe pairs give one card the first card", PCIePairs4(), nil, 1, "[0]"},
		{"PCIe pairs give a pair one switch", PCIePairs4(), nil, 2, "[0 1]"},
		{"PCIe pairs give one card the orphan of a broken pair", PCIePairs4(), []int{0}, 1, "[1]"},
		{"PCIe pairs give a pair the intact switch", PCIePairs4(), []int{0}, 2, "[2 3]"},
		{"PCIe pairs give three cards a whole pair and one more", PCIePairs4(), nil, 3, "[0 1 2]"},
		{"two sockets give a pair one switch", TwoSocket16(), nil, 2, "[0 1]"},
		{"two sockets give four cards one switch tree", TwoSocket16(), nil, 4, "[0 1 2 3]"},
		{"two sockets give eight cards one CPU", TwoSocket16(), nil, 8, "[0 1 2 3 4 5 6 7]"},
		{"two sockets give eight cards the free CPU", TwoSocket16(), []int{3}, 8, "[8 9 10 11 12 13 14 15]"},
		{"two sockets give one card the orphan of a broken pair", TwoSocket16(), []int{0}, 1, "[1]"},
		{"two sockets give a pair an intact switch beside broken ones", TwoSocket16(), []int{0, 5}, 2, "[2 3]"},
		{"two sockets give four cards an intact tree beside a broken one", TwoSocket16(), []int{2}, 4, "[4 5 6 7]"},
		{"two sockets give sixteen cards the whole node", TwoSocket16(), nil, 16, "[0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := busy(NewNode("n", tc.inv, 1), tc.busy...)
			if got := chosen(t, n, wholeCards(tc.k, api.PodOptions{}, api.PolicyBinpack)); got != tc.want {
				t.Fatalf("chose %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNodeWithoutLinksKeepsScoreOrder(t *testing.T) {
	inv := TwoSocket16()
	inv.Links = nil
	n := busy(NewNode("n", inv, 1), 0)
	// Without links, the lowest free indices win, as before topology existed.
	if got := chosen(t, n, wholeCards(2, api.PodOptions{}, api.PolicyBinpack)); got != "[1 2]" {
		t.Fatalf("chose %s, want [1 2]", got)
	}
}

func TestSingleCardPolicies(t *testing.T) {
	// Card 0 is half used, so binpack prefers it; card 2's partner is busy, so
	// taking it breaks no free pair.
	for _, tc := range []struct {
		name   string
		policy api.Policy
		want   string
	}{
		{"binpack shares the used card whatever the links", api.PolicyBinpack, "[0]"},
		{"topology takes the card whose loss hurts least", api.PolicyTopology, "[2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NewNode("n", PCIePairs4(), 1)
			n.Cards[0].Used = Usage{MemoryMiB: 40000, Cores: 50, Tenants: 1, Classes: ClassCounts{0, 1, 0}}
			busy(n, 3)
			r := req(tc.policy, api.ContainerRequest{Name: "c", Cards: 1, MemoryMiB: 1000, Cores: 10})
			if got := chosen(t, n, r); got != tc.want {
				t.Fatalf("chose %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNodeScoreRewardsBetterLinks(t *testing.T) {
	for _, tc := range []struct {
		name         string
		better, than *api.NodeInventory
		k            int
		policy       api.Policy
	}{
		{"an NVSwitch node beats a PCIe node for eight cards", DGXA100(), TwoSocket16(), 8, api.PolicyBinpack},
		{"an NVSwitch node beats the DGX-1 mesh for eight cards", DGXA100(), DGX1(), 8, api.PolicyBinpack},
		{"the DGX-1 mesh beats a PCIe node for four cards", DGX1(), TwoSocket16(), 4, api.PolicyBinpack},
		{"under the topology policy NVSwitch beats PCIe for two cards", DGXA100(), PCIePairs4(), 2, api.PolicyTopology},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := wholeCards(tc.k, api.PodOptions{}, tc.policy)
			r.TopologyWeight = 1
			sb, eb := ScorePod(NewNode("a", tc.better, 1), r)
			st, et := ScorePod(NewNode("b", tc.than, 1), r)
			if eb != nil || et != nil {
				t.Fatalf("refused: %v %v", eb, et)
			}
			if !(sb > st) {
				t.Fatalf("better node scored %.2f, other %.2f", sb, st)
			}
		})
	}
}

func TestNUMABinding(t *testing.T) {
	bind := api.PodOptions{NUMABind: true}
	for _, tc := range []struct {
		name    string
		inv     *api.NodeInventory
		busy    []int
		k       int
		opts    api.PodOptions
		want    string
		refusal string
	}{
		{"a bound pair stays on one NUMA node even across a better link",
			withLinks(DGX1(), map[[2]int]api.LinkType{{0, 4}: "NV6"}), []int{1, 2, 3, 5, 6, 7}, 2, bind, "", "needs 2 cards on one NUMA node (tessera.io/numa-bind=true), 2 of 8 fit but not on one node (node 0: 1, node 1: 1)"},
		{"unbound, the better cross-NUMA link wins",
			withLinks(DGX1(), map[[2]int]api.LinkType{{0, 4}: "NV6"}), []int{1, 2, 3, 5, 6, 7}, 2, api.PodOptions{}, "[0 4]", ""},
		{"a bound quad takes an intact switch tree", TwoSocket16(), []int{1}, 4, bind, "[4 5 6 7]", ""},
		{"a bound set on a node without links uses one NUMA node", noLinks(TwoSocket16()), []int{0, 1, 2, 3, 4}, 4, bind, "[8 9 10 11]", ""},
		{"unbound on a node without links, one NUMA node is still preferred", noLinks(TwoSocket16()), []int{0, 1, 2, 3, 4}, 4, api.PodOptions{}, "[8 9 10 11]", ""},
		{"unbound without links, a split set is taken when no node has room", noLinks(PCIePairs4()), []int{0, 2}, 2, api.PodOptions{}, "[1 3]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := busy(NewNode("n", tc.inv, 1), tc.busy...)
			r := wholeCards(tc.k, tc.opts, api.PolicyBinpack)
			if tc.refusal != "" {
				_, err := FitPod(n, r)
				if err == nil || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("got %v, want a refusal containing %q", err, tc.refusal)
				}
				if !err.Resolvable() {
					t.Fatal("a NUMA refusal caused by busy cards should be resolvable")
				}
				return
			}
			if got := chosen(t, n, r); got != tc.want {
				t.Fatalf("chose %s, want %s", got, tc.want)
			}
		})
	}
}

func withLinks(inv *api.NodeInventory, set map[[2]int]api.LinkType) *api.NodeInventory {
	for p, l := range set {
		inv.Links[p[0]][p[1]], inv.Links[p[1]][p[0]] = l, l
	}
	return inv
}

func noLinks(inv *api.NodeInventory) *api.NodeInventory {
	inv.Links = nil
	return inv
}

func TestPreferredCards(t *testing.T) {
	for _, tc := range []struct {
		name       string
		inv        *api.NodeInventory
		free, must []int
		k          int
		want       string
	}{
		{"a pair on the DGX-1 gets a double NVLink", DGX1(), []int{0, 1, 2, 3, 4, 5, 6, 7}, nil, 2, "[0 3]"},
		{"a must-include card pulls in its best partner", DGX1(), []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{5}, 2, "[5 6]"},
		{"four of sixteen PCIe cards stay in one tree", TwoSocket16(), []int{1, 4, 5, 6, 7, 9}, nil, 4, "[4 5 6 7]"},
		{"without links the lowest free cards are taken", noLinks(TwoSocket16()), []int{9, 4, 1}, []int{9}, 2, "[1 9]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := NewNode("n", tc.inv, 1).PreferredCards(tc.free, tc.must, tc.k)
			if !ok || fmt.Sprint(got) != tc.want {
				t.Fatalf("got %v (ok %v), want %s", got, ok, tc.want)
			}
		})
	}
	if _, ok := NewNode("n", DGX1(), 1).PreferredCards([]int{0, 1}, []int{5}, 2); ok {
		t.Fatal("a must-include card that is not free was accepted")
	}
}

func TestQoSPools(t *testing.T) {
	shared := func(q api.QoSClass) *Request {
		r := req(api.PolicyBinpack, api.ContainerRequest{Name: "c", Cards: 1, MemoryMiB: 1000, Cores: 20})
		r.Options.QoS = q
		return r
	}
	for _, tc := range []struct {
		name    string
		tenants api.QoSClass
		cores   int
		req     *Request
		want    string
	}{
		{"a card hosting burst-share tasks takes another burst-share task", api.QoSBurstShare, 20, shared(api.QoSBurstShare), "[a]"},
		{"a card hosting burst-share tasks refuses a fixed-share task", api.QoSBurstShare, 20, shared(api.QoSFixedShare), "card 0 (GPU-a): in another QoS pool: card hosts burst-share tasks, this pod is fixed-share (tessera.io/qos)"},
		{"an empty class is the default fixed-share class", api.QoSFixedShare, 20, shared(""), "[a]"},
		{"a best-effort task may not join fixed-share tenants", api.QoSFixedShare, 20, shared(api.QoSBestEffort), "card hosts fixed-share tasks, this pod is best-effort"},
		{"an exclusive tenant puts its card in no pool", api.QoSBurstShare, 100, shared(api.QoSBestEffort), "cores are fully taken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testNode(healthy(1)...)
			a := []api.ContainerAssignment{{Name: "x", Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 1000, Cores: tc.cores}}}}
			if errs := n.Account(a, Tenancy{QoS: tc.tenants}); len(errs) > 0 {
				t.Fatal(errs)
			}
			f, err := FitPod(n, tc.req)
			var got string
			if err != nil {
				got = err.Detail()
			} else {
				got = fmt.Sprint(cardsOf(f)[0])
				got = "[" + strings.TrimPrefix(got[1:len(got)-1], "GPU-") + "]"
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want it to contain %q", got, tc.want)
			}
			if err != nil && tc.cores < 100 && !err.Resolvable() {
				t.Fatal("a QoS refusal clears when the tenants leave, so it must be resolvable")
			}
			n.Release(a, Tenancy{QoS: tc.tenants})
			if n.Cards[0].Used != (Usage{}) {
				t.Fatalf("release left %+v", n.Cards[0].Used)
			}
		})
	}
	// Once the card is idle again, any class may take it.
	n := testNode(healthy(1)...)
	a := []api.ContainerAssignment{{Name: "x", Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 1000, Cores: 20}}}}
	n.Account(a, Tenancy{QoS: api.QoSBurstShare})
	n.Release(a, Tenancy{QoS: api.QoSBurstShare})
	if _, err := FitPod(n, shared(api.QoSFixedShare)); err != nil {
		t.Fatalf("an idle card refused a class: %v", err)
	}
}

func TestSingleCardGangMembersPreferWellLinkedNodes(t *testing.T) {
	score := func(inv *api.NodeInventory, gang int) float64 {
		r := wholeCards(1, api.PodOptions{}, api.PolicyBinpack)
		r.TopologyWeight, r.GangSize = 1, gang
		s, err := ScorePod(NewNode("n", inv, 1), r)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if nv, pcie := score(DGXA100(), 8), score(tiledLinks(DGXA100(), PCIePairs4()), 8); !(nv > pcie) {
		t.Fatalf("a member of an 8-pod gang scores the NVSwitch node %.1f, a PCIe node %.1f", nv, pcie)
	}
	if a, b := score(DGXA100(), 1), score(DGX1(), 1); a != b {
		t.Fatalf("a pod without a gang should not see links in the node score: %.1f vs %.1f", a, b)
	}
}

// tiledLinks is inv with other's link pattern tiled over its cards: same cards,
// PCIe pairs instead of NVSwitch.
func tiledLinks(inv, other *api.NodeInventory) *api.NodeInventory {
	m := len(other.Cards)
	for i := range inv.Links {
		for j := range inv.Links[i] {
			switch {
			case i == j:
			case i/m == j/m:
				inv.Links[i][j] = other.Links[i%m][j%m]
			default:
				inv.Links[i][j] = api.LinkCrossNUMA
			}
		}
	}
	return inv
}

// keepLargest keeps the k largest values whatever order they come in, ties and all.
func TestKeepLargestKeepsTheLargest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k       int
		offered []float64
		want    []float64
	}{
		{"fewer offered than k", 3, []float64{2, 1}, []float64{2, 1}},
		{"ascending", 2, []float64{1, 2, 3, 4}, []float64{4, 3}},
		{"descending", 2, []float64{4, 3, 2, 1}, []float64{4, 3}},
		{"ties keep their count", 3, []float64{5, 5, 1, 5, 5}, []float64{5, 5, 5}},
		{"negatives", 1, []float64{-3, -1, -2}, []float64{-1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var top [maxTopologyCards]float64
			n := 0
			for _, x := range tc.offered {
				n = keepLargest(&top, n, tc.k, x)
			}
			if !slices.Equal(top[:n], tc.want) {
				t.Fatalf("the %d largest of %v: %v, want %v", tc.k, tc.offered, top[:n], tc.want)
			}
		})
	}
}
