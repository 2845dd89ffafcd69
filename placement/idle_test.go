package placement

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

func small(policy api.Policy) *Request {
	return req(policy, api.ContainerRequest{MemoryMiB: 1000, Cores: 10})
}

func holdOne(n *Node, uuid string, t Tenancy) []api.ContainerAssignment {
	a := []api.ContainerAssignment{{Name: "x", Cards: []api.CardAssignment{{UUID: uuid, MemoryMiB: 1000, Cores: 10}}}}
	if errs := n.Account(a, t); len(errs) > 0 {
		panic(errs)
	}
	return a
}

func TestIdleOnlyNeverShares(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder Tenancy
		pod    api.Policy
		want   string // the node's reason, or the card chosen
	}{
		{"an idle-only pod takes the idle card beside a used one", Tenancy{}, api.PolicyIdleOnly, "GPU-b"},
		{"an idle-only pod refuses a card another pod uses", Tenancy{}, api.PolicyIdleOnly,
			`container "c0" needs 1 cards, 0 of 1 fit (1 in use, the pod asks for idle cards only): card 0 is in use by 1 container; the pod asks for idle cards only (tessera.io/card-policy: idle-only)`},
		{"a binpack pod refuses the card an idle-only pod holds", Tenancy{IdleOnly: true}, api.PolicyBinpack,
			`container "c0" needs 1 cards, 0 of 1 fit (1 held by an idle-only pod): card 0 is held by an idle-only pod`},
		{"an idle-only pod refuses another's idle-only card", Tenancy{IdleOnly: true}, api.PolicyIdleOnly,
			`(1 held by an idle-only pod): card 0 is held by an idle-only pod`},
		{"a binpack pod joins a card a shared pod holds", Tenancy{}, api.PolicyBinpack, "GPU-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cards := 1
			if strings.HasPrefix(tc.want, "GPU-b") {
				cards = 2
			}
			n := testNode(healthy(cards)...)
			holdOne(n, "GPU-a", tc.holder)
			f, ferr := FitPod(n, small(tc.pod))
			switch {
			case strings.HasPrefix(tc.want, "GPU-"):
				if ferr != nil || f.Containers[0].Cards[0].UUID != tc.want {
					t.Fatalf("got %+v, %v; want card %s", f, ferr, tc.want)
				}
			case ferr == nil:
				t.Fatalf("placed on %v, want %q", cardsOf(f), tc.want)
			case !strings.Contains(ferr.Error(), tc.want):
				t.Fatalf("reason %q, want it to contain %q", ferr.Error(), tc.want)
			case !ferr.Resolvable():
				t.Fatal("the holder may leave or be evicted: the refusal must be resolvable")
			}
		})
	}
}

// Releasing the idle-only holder frees its card for anybody; releasing it as a
// shared tenant would leave the card held, and is reported.
func TestReleasingTheIdleOnlyHolderFreesTheCard(t *testing.T) {
	n := testNode(healthy(1)...)
	a := holdOne(n, "GPU-a", Tenancy{IdleOnly: true})
	if errs := n.Release(a, Tenancy{}); len(errs) == 0 {
		t.Fatal("a release that leaves the idle-only mark was not reported")
	}
	n = testNode(healthy(1)...)
	a = holdOne(n, "GPU-a", Tenancy{IdleOnly: true})
	if errs := n.Release(a, Tenancy{IdleOnly: true}); len(errs) > 0 || n.Cards[0].Used != (Usage{}) {
		t.Fatalf("release left %+v, %v", n.Cards[0].Used, errs)
	}
	if _, ferr := FitPod(n, small(api.PolicyBinpack)); ferr != nil {
		t.Fatalf("the freed card refused: %v", ferr)
	}
}

// An idle-only pod's own containers may share its cards; Reserve marks every card it
// books, so the next pod sees them held.
func TestAnIdleOnlyPodsContainersShareItsCards(t *testing.T) {
	n := testNode(healthy(1)...)
	r := req(api.PolicyIdleOnly, api.ContainerRequest{MemoryMiB: 1000, Cores: 10}, api.ContainerRequest{MemoryMiB: 1000, Cores: 10})
	f, ferr := FitPod(n, r)
	if ferr != nil {
		t.Fatalf("an idle-only pod's second container refused its first's card: %v", ferr)
	}
	if err := n.Reserve(f.Containers, r.Tenancy()); err != nil {
		t.Fatal(err)
	}
	if u := n.Cards[0].Used; u.IdleOnly != 2 || u.Tenants != 2 {
		t.Fatalf("card booked as %+v, want two idle-only tenants", u)
	}
	if _, ferr := FitPod(n, small(api.PolicySpread)); ferr == nil || ferr.Rejects[0].Reason != ReasonHeldIdleOnly {
		t.Fatalf("another pod got the held card: %v", ferr)
	}
}

// Among idle cards an idle-only pod chooses as binpack does: the card it fills most,
// keeping the larger one whole.
func TestAnIdleOnlyPodChoosesAmongIdleCardsAsBinpack(t *testing.T) {
	n := testNode(api.Card{Healthy: true, MemoryMiB: 80000}, api.Card{Healthy: true, MemoryMiB: 40000})
	if got := chosen(t, n, small(api.PolicyIdleOnly)); got != "[b]" {
		t.Fatalf("idle-only chose %s, want the smaller card b", got)
	}
	if got := chosen(t, n, small(api.PolicySpread)); got != "[a]" {
		t.Fatalf("control: spread chose %s, want the larger card a", got)
	}
}
