package book

import (
	"reflect"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// The book remembers what each claim holds on a DRA node: what evicting its pod frees.
func TestClaimCardsAreWhatTheClaimWasBookedOn(t *testing.T) {
	l := NewLedger()
	n := testNode("dra", "NVIDIA A100", 2, 1) // card 1 unhealthy
	l.AddDRANode(n, false)
	a := []api.CardAssignment{{UUID: n.Cards[0].UUID, MemoryMiB: 4096, Cores: 30}, {UUID: n.Cards[1].UUID, MemoryMiB: 2048, Cores: 10}}
	if errs := l.AccountClaim("dra", "ns/a", a); len(errs) != 0 {
		t.Fatal(errs)
	}
	if errs := l.AccountClaim("dra", "ns/b", []api.CardAssignment{{UUID: "GPU-not-here", MemoryMiB: 1, Cores: 1}}); len(errs) != 1 {
		t.Fatalf("a card the node does not have was booked: %v", errs)
	}
	got, ok := l.ClaimCards("dra", "ns/a")
	if !ok || !reflect.DeepEqual(got, a) {
		t.Errorf("claim ns/a holds %v (%v), want %v", got, ok, a)
	}
	got[0].MemoryMiB = 1 // a copy: the caller cannot change the book
	if again, _ := l.ClaimCards("dra", "ns/a"); again[0].MemoryMiB != 4096 {
		t.Errorf("changing the returned cards changed the book: %v", again)
	}
	for _, missing := range [][2]string{{"dra", "ns/b"}, {"other", "ns/a"}} {
		if _, ok := l.ClaimCards(missing[0], missing[1]); ok {
			t.Errorf("claim %s holds cards on %s", missing[1], missing[0])
		}
	}
	node := l.DRANode("dra")
	if node == nil || node.Cards[0].Used.MemoryMiB != 4096 || node.Cards[1].Used.Cores != 10 {
		t.Fatalf("DRA node dra reads %+v, want the claim's usage", node)
	}
	node.Cards[0].Used.MemoryMiB = 0
	if l.DRANode("dra").Cards[0].Used.MemoryMiB != 4096 {
		t.Error("changing the returned node changed the book")
	}
	if l.DRANode("dp") != nil {
		t.Error("a node the book does not hold as a DRA node was returned")
	}
	if !l.DRATakesClaims("dra", &node.Cards[0]) || l.DRATakesClaims("dra", &node.Cards[1]) {
		t.Error("want the healthy card to take claims and the unhealthy one not")
	}
}
