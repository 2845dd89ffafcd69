package placement

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/api"
)

// cordoned is a healthy card an administrator has cordoned for reason.
func cordoned(reason string) api.Card {
	return api.Card{Healthy: true, Cordon: &api.CardCordon{Reason: reason, Since: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}}
}

var serving = api.Card{Healthy: true}

// A cordoned card takes no new task: the container goes to another card, or the node
// refuses it naming the card and the administrator's reason where the cordon is what
// stands, and counting it as cordoned, apart from unhealthy cards, where it is not.
func TestACordonedCardTakesNoNewTask(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  *Node
		req   api.ContainerRequest
		cards []string // the cards it gets; nil: refused with want
		want  string
	}{
		{"the container goes to the card that is not cordoned", testNode(cordoned("ECC"), serving),
			api.ContainerRequest{MemoryMiB: 1000}, []string{"GPU-b"}, ""},
		{"binpack passes over a busier cordoned card", used(testNode(cordoned("ECC"), serving), 0, 1000, 10, 1),
			api.ContainerRequest{MemoryMiB: 1000}, []string{"GPU-b"}, ""},
		{"a lone cordoned card refuses with the reason", testNode(cordoned("ECC errors, RMA #4411")),
			api.ContainerRequest{Name: "train", MemoryMiB: 1000}, nil,
			`container "train" needs 1 cards, 0 of 1 fit (1 cordoned): card GPU-a is cordoned: ECC errors, RMA #4411`},
		{"a cordon without a reason is named alone", testNode(cordoned(""), api.Card{Healthy: false}),
			api.ContainerRequest{Name: "c", MemoryMiB: 1000}, nil,
			`container "c" needs 1 cards, 0 of 2 fit (1 cordoned, 1 unhealthy): card GPU-a is cordoned`},
		{"the first cordoned card is named and the others counted", testNode(cordoned("fan"), cordoned("fan too"), cordoned("")),
			api.ContainerRequest{Name: "c", Cards: 2, MemoryMiB: 1000}, nil,
			`container "c" needs 2 cards, 0 of 3 fit (3 cordoned): card GPU-a is cordoned: fan (and 2 more cordoned)`},
		{"cards are only counted when the cordon is not what stands", testNode(cordoned("fan"), api.Card{Healthy: false}),
			api.ContainerRequest{Name: "c", Cards: 2, MemoryMiB: 1000}, nil,
			`container "c" needs 2 cards, 0 of 2 fit (1 cordoned, 1 unhealthy)`},
		{"an unhealthy card that is also cordoned reads unhealthy", testNode(api.Card{Cordon: cordoned("x").Cordon}),
			api.ContainerRequest{Name: "c", MemoryMiB: 1000}, nil,
			`container "c" needs 1 cards, 0 of 1 fit (1 unhealthy)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FitPod(tc.node, req(api.PolicyBinpack, tc.req))
			switch {
			case tc.cards != nil && err != nil:
				t.Fatalf("refused: %s", err.Detail())
			case tc.cards != nil && !reflect.DeepEqual(cardsOf(f), [][]string{tc.cards}):
				t.Fatalf("placed on %v, want %v", cardsOf(f), tc.cards)
			case tc.cards == nil && err == nil:
				t.Fatalf("placed on %v, want a refusal", cardsOf(f))
			case tc.cards == nil && err.Error() != tc.want:
				t.Fatalf("reason %q\nwant   %q", err.Error(), tc.want)
			}
		})
	}
}

// Evicting tenants cannot uncordon a card: a node refused for cordons is not
// resolvable, so preempt and reclaim leave it alone; the pending metric counts the
// refusal as "cordoned", apart from "unhealthy"; each refused card carries the reason.
func TestACordonRefusalIsNotResolvable(t *testing.T) {
	n := used(used(testNode(cordoned("drain for RMA"), cordoned("drain for RMA")), 0, 39000, 50, 1), 1, 39000, 50, 1)
	_, err := FitPod(n, req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 1000}))
	if err == nil {
		t.Fatal("placed a container on cordoned cards")
	}
	if err.Resolvable() {
		t.Error("Resolvable() = true; evicting the tenants leaves the cards cordoned")
	}
	if d := err.Dominant(); d != ReasonCordoned || d == ReasonUnhealthy {
		t.Errorf("Dominant() = %q, want %q", d, ReasonCordoned)
	}
	const card = "card 0 (GPU-a): cordoned: drain for RMA"
	if !strings.Contains(err.Detail(), card) {
		t.Errorf("detail %q\nwant it to contain %q", err.Detail(), card)
	}
	if ex := err.Explained(); len(ex) != 2 || ex[1].Reason != ReasonCordoned || ex[1].Detail != "drain for RMA" {
		t.Errorf("explained %+v, want both cards cordoned with the reason as the detail", ex)
	}
}

// Running tenants of a cordoned card stay booked: its memory is not handed out again
// once the cordon is lifted.
func TestACordonedCardKeepsItsTenantsBooked(t *testing.T) {
	n := testNode(cordoned("fan"))
	if errs := n.Account([]api.ContainerAssignment{{Name: "c", Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 30000, Cores: 50}}}}, Tenancy{QoS: api.QoSFixedShare}); len(errs) > 0 {
		t.Fatal(errs)
	}
	n.Cards[0].Cordon = nil
	if _, err := FitPod(n, req(api.PolicyBinpack, api.ContainerRequest{MemoryMiB: 20000})); err == nil || err.Dominant() != ReasonMemory {
		t.Fatalf("uncordoned card took 20000 MiB beside 30000 of 40000 (%v), want insufficient memory", err)
	}
}
