package placement

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

func testNode(cards ...api.Card) *Node {
	inv := &api.NodeInventory{Version: api.InventoryVersion}
	for i, c := range cards {
		c.Index = i
		if c.UUID == "" {
			c.UUID = "GPU-" + string(rune('a'+i))
		}
		if c.Model == "" {
			c.Model = "NVIDIA A100-SXM4-40GB"
		}
		if c.MemoryMiB == 0 {
			c.MemoryMiB = 40000
		}
		if c.Shares == 0 {
			c.Shares = 10
		}
		inv.Cards = append(inv.Cards, c)
	}
	return NewNode("node-1", inv, 1)
}

func healthy(n int) []api.Card {
	cs := make([]api.Card, n)
	for i := range cs {
		cs[i].Healthy = true
	}
	return cs
}

func used(n *Node, i int, mem int64, cores, tenants int) *Node {
	n.Cards[i].Used = Usage{MemoryMiB: mem, Cores: cores, Tenants: tenants}
	return n
}

func req(policy api.Policy, cs ...api.ContainerRequest) *Request {
	for i := range cs {
		if cs[i].Name == "" {
			cs[i].Name = "c" + string(rune('0'+i))
		}
		if cs[i].Cards == 0 {
			cs[i].Cards = 1
		}
	}
	return &Request{Containers: cs, CardPolicy: policy, NodePolicy: policy}
}

func cardsOf(f *Fit) [][]string {
	var out [][]string
	for _, c := range f.Containers {
		var u []string
		for _, a := range c.Cards {
			u = append(u, a.UUID)
		}
		out = append(out, u)
	}
	return out
}

func TestFitPodChoosesCards(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *Node
		req  *Request
		want string
	}{
		{"binpack puts a small request on the busiest card that fits",
			used(used(testNode(healthy(3)...), 1, 30000, 50, 2), 2, 10000, 20, 1),
			req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 8000, Cores: 20}), "[[GPU-b]]"},
		{"spread puts a small request on the idle card",
			used(used(testNode(healthy(3)...), 0, 30000, 50, 2), 2, 10000, 20, 1),
			req(api.PolicySpread, api.ContainerRequest{MemoryMiB: 8000, Cores: 20}), "[[GPU-b]]"},
		{"binpack skips the busiest card when it lacks memory",
			used(used(testNode(healthy(3)...), 1, 35000, 50, 2), 2, 10000, 20, 1),
			req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 8000, Cores: 20}), "[[GPU-c]]"},
		{"ties break towards the lower card index",
			testNode(healthy(4)...),
			req(api.PolicyBinpack, api.ContainerRequest{Cards: 2, MemoryMiB: 1000}), "[[GPU-a GPU-b]]"},
		{"a second container sees the cards the first took",
			testNode(healthy(2)...),
			req(api.PolicySpread, api.ContainerRequest{MemoryMiB: 1000, Cores: 10}, api.ContainerRequest{MemoryMiB: 1000, Cores: 10}), "[[GPU-a] [GPU-b]]"},
		{"an exclusive request takes the idle card",
			used(testNode(healthy(2)...), 0, 1000, 10, 1),
			req(api.PolicyBinpack, api.ContainerRequest{MemoryPercent: 100, Cores: 100}), "[[GPU-b]]"},
		{"a percentage request is sized by each card's memory",
			testNode(api.Card{Healthy: true, MemoryMiB: 16000}),
			req(api.PolicyBinpack, api.ContainerRequest{MemoryPercent: 50}), "[[GPU-a]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FitPod(tc.node, tc.req)
			if err != nil {
				t.Fatalf("unexpected refusal: %s", err.Detail())
			}
			if got := fmtList(cardsOf(f)); got != tc.want {
				t.Fatalf("cards %s, want %s", got, tc.want)
			}
		})
	}
}

func fmtList(v [][]string) string {
	var parts []string
	for _, c := range v {
		parts = append(parts, "["+strings.Join(c, " ")+"]")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestFitPodRefuses(t *testing.T) {
	a100 := api.Card{Healthy: true, Model: "NVIDIA A100-SXM4-40GB"}
	t4 := api.Card{Healthy: true, Model: "Tesla T4", MemoryMiB: 15000}
	for _, tc := range []struct {
		name     string
		node     *Node
		req      *Request
		opts     api.PodOptions
		want     string
		resolved bool
	}{
		{"an unhealthy card is never used", testNode(api.Card{Healthy: false}), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1}), api.PodOptions{}, "card 0 (GPU-a): unhealthy", false},
		{"a card in MIG mode is not shared", testNode(api.Card{Healthy: true, MIG: true}), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1}), api.PodOptions{}, "in MIG mode", false},
		{"memory beyond what is free names the card and the amounts", used(testNode(healthy(1)...), 0, 39000, 0, 1), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 2000}), api.PodOptions{}, "card 0 (GPU-a): insufficient memory: 2000 MiB wanted, 1000 of 40000 MiB free", true},
		{"memory beyond the card's size is not resolvable", testNode(healthy(1)...), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 50000}), api.PodOptions{}, "smaller than the request: 50000 MiB wanted, card has 40000 MiB", false},
		{"cores beyond 100 in total are refused", used(testNode(healthy(1)...), 0, 0, 80, 1), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1, Cores: 30}), api.PodOptions{}, "insufficient cores: 30% wanted, 20% free", true},
		{"a full card takes no zero-core request", used(testNode(healthy(1)...), 0, 1000, 100, 1), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1}), api.PodOptions{}, "cores are fully taken", true},
		{"an exclusive request refuses a shared card", used(testNode(healthy(1)...), 0, 1000, 0, 1), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1, Cores: 100}), api.PodOptions{}, "not idle for an exclusive request", true},
		{"the share count caps tenants", used(testNode(api.Card{Healthy: true, Shares: 2}), 0, 10, 0, 2), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1}), api.PodOptions{}, "2 of 2 shares taken", true},
		{"a type include keeps other models out, ignoring case", testNode(a100, t4), req(api.PolicyBinpack, api.ContainerRequest{Cards: 2, MemoryMiB: 1}), api.PodOptions{TypeInclude: []string{"a100"}}, "card 1 (GPU-b): excluded by GPU type annotation: model Tesla T4 matches nothing in tessera.io/gpu-type-include", false},
		{"a type exclude removes matching models", testNode(a100, t4), req(api.PolicyBinpack, api.ContainerRequest{Cards: 2, MemoryMiB: 1}), api.PodOptions{TypeExclude: []string{"T4", "h100"}}, "model Tesla T4 matches tessera.io/gpu-type-exclude", false},
		{"a UUID include is exact", testNode(healthy(2)...), req(api.PolicyBinpack, api.ContainerRequest{Cards: 2, MemoryMiB: 1}), api.PodOptions{UUIDInclude: []string{"GPU-a", "GPU-"}}, "card 1 (GPU-b): excluded by UUID annotation: not in tessera.io/gpu-uuid-include", false},
		{"a UUID exclude removes the card", testNode(healthy(1)...), req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1}), api.PodOptions{UUIDExclude: []string{"GPU-a"}}, "listed in tessera.io/gpu-uuid-exclude", false},
		{"too few cards on the node says so", testNode(healthy(2)...), req(api.PolicyBinpack, api.ContainerRequest{Cards: 4, MemoryMiB: 1}), api.PodOptions{}, `needs 4 cards, 2 of 2 fit (too few cards on the node)`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Options = tc.opts
			f, err := FitPod(tc.node, tc.req)
			if err == nil {
				t.Fatalf("placed on %v, want a refusal", cardsOf(f))
			}
			if !strings.Contains(err.Detail(), tc.want) {
				t.Fatalf("detail %q\nwant it to contain %q", err.Detail(), tc.want)
			}
			if err.Resolvable() != tc.resolved {
				t.Fatalf("Resolvable() = %v, want %v", err.Resolvable(), tc.resolved)
			}
		})
	}
}

func TestFitErrorSummaryIsShortAndCounted(t *testing.T) {
	n := testNode(append(healthy(3), api.Card{Healthy: false})...)
	for i := 0; i < 3; i++ {
		used(n, i, 39000, 0, 1)
	}
	_, err := FitPod(n, req(api.PolicyBinpack, api.ContainerRequest{Name: "train", Cards: 2, MemoryMiB: 2000}))
	want := `container "train" needs 2 cards, 0 of 4 fit (1 unhealthy, 3 insufficient memory)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestNodeScoreOrdersNodesByPolicy(t *testing.T) {
	idle := testNode(healthy(2)...)
	busy := used(testNode(healthy(2)...), 0, 20000, 50, 1)
	r := api.ContainerRequest{MemoryMiB: 4000, Cores: 10}
	fi, _ := FitPod(idle, req(api.PolicyBinpack, r))
	fb, _ := FitPod(busy, req(api.PolicyBinpack, r))
	if !(fb.Score > fi.Score) {
		t.Fatalf("binpack: busy %.1f should beat idle %.1f", fb.Score, fi.Score)
	}
	fi, _ = FitPod(idle, req(api.PolicySpread, r))
	fb, _ = FitPod(busy, req(api.PolicySpread, r))
	if !(fi.Score > fb.Score) {
		t.Fatalf("spread: idle %.1f should beat busy %.1f", fi.Score, fb.Score)
	}
}

// Preemption and reclaim may evict only where it can help: a container is resolvable
// on a node when enough cards refuse it for usage alone (the fixed filters run first).
func TestFitErrorResolvableCountsCards(t *testing.T) {
	rejects := func(rs ...Reason) []CardReject {
		out := make([]CardReject, len(rs))
		for i, r := range rs {
			out[i] = CardReject{Index: i, Reason: r}
		}
		return out
	}
	cases := []struct {
		name string
		e    FitError
		want bool
	}{
		{"one busy card is enough for one", FitError{Wanted: 1, Cards: 2, Rejects: rejects(ReasonTypeFilter, ReasonMemory)}, true},
		{"two wanted, one busy card of the right type", FitError{Wanted: 2, Cards: 2, Rejects: rejects(ReasonTypeFilter, ReasonMemory)}, false},
		{"one fits and one busy make two", FitError{Wanted: 2, Fitting: 1, Cards: 2, Rejects: rejects(ReasonCores)}, true},
		{"only filtered cards", FitError{Wanted: 1, Cards: 3, Rejects: rejects(ReasonUUIDFilter, ReasonTypeFilter, ReasonUnhealthy)}, false},
		{"cards too small", FitError{Wanted: 1, Cards: 1, Rejects: rejects(ReasonTooSmall)}, false},
		{"an exclusive request on a shared card", FitError{Wanted: 1, Cards: 1, Rejects: rejects(ReasonNotIdle)}, true},
		{"a node without cards", FitError{Wanted: 1}, false},
	}
	for _, c := range cases {
		if got := c.e.Resolvable(); got != c.want {
			t.Errorf("%s: Resolvable() = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestContainsFoldIgnoresCaseOnly(t *testing.T) {
	for _, tc := range []struct {
		subs  []string
		model string
		want  bool
	}{
		{[]string{"a100"}, "NVIDIA A100-SXM4-40GB", true},
		{[]string{"SXM4-40gb"}, "NVIDIA A100-SXM4-40GB", true},
		{[]string{"h100", "T4"}, "Tesla T4", true},
		{[]string{"h100"}, "NVIDIA A100-SXM4-40GB", false},
		{[]string{"NVIDIA A100-SXM4-40GB-X"}, "NVIDIA A100-SXM4-40GB", false},
		{[]string{""}, "Tesla T4", true}, // as strings.Contains
		{nil, "Tesla T4", false},
		{[]string{"t4"}, "", false},
		// Beyond ASCII, as strings.ToLower has it: the Kelvin sign lowers to k.
		{[]string{"\u212a80"}, "Tesla K80", true},
		{[]string{"k80"}, "Tesla \u212a80", true},
	} {
		if got := containsFold(tc.subs, tc.model); got != tc.want {
			t.Errorf("containsFold(%q, %q) = %v, want %v", tc.subs, tc.model, got, tc.want)
		}
	}
}

// A pod pinned by UUID to a card elsewhere does not aim at a node's cards in MIG mode:
// they are excluded by its filter first, so that node's refusal is not the one
// reported for the pod (a pod pinned to an unhealthy card hears "unhealthy", not "in
// MIG mode" from another node).
func TestCardsInMIGModeThatThePodsFiltersExcludeAreNotTargeted(t *testing.T) {
	node := testNode(api.Card{Healthy: true, MIG: true}, api.Card{Healthy: true, MIG: true})
	r := req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1})
	r.Options.UUIDInclude = []string{"GPU-elsewhere"}
	_, err := FitPod(node, r)
	if err == nil {
		t.Fatal("a pod pinned to another card fits a node of MIG cards")
	}
	if got := err.Targeted(); got != 0 {
		t.Errorf("Targeted() = %d on a node whose every card the pod's UUID filter excludes, want 0: %s", got, err.Detail())
	}
}
