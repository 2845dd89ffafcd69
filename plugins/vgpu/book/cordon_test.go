package book

import (
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/api"
)

// A cordoned card is a pause, as a cordoned node is: it leaves what is free now and the
// supply the queue shares divide, but not what the cluster could hold, and a request
// that only it could take is not called one that can never run (the predicate then
// names the card and why).
func TestACordonedCardIsAPauseNotASmallerCluster(t *testing.T) {
	l := NewLedger()
	n := testNode("n", "NVIDIA A100", 2, -1)
	n.Cards[1].Cordon = &api.CardCordon{Reason: "fan", Since: time.Now()}
	l.AddNode(n)
	if free, _ := l.Free(); free.Cores != 100 || free.Slots != 10 {
		t.Errorf("free %+v, want one card's 100 cores and 10 slots", free)
	}
	if total, _ := l.Total(); total.Cores != 200 {
		t.Errorf("total %+v, want both cards' 200 cores", total)
	}
	if supply, _ := l.CardTotals(); supply.Cores != 100 {
		t.Errorf("the queue shares divide %+v, want the uncordoned card's 100 cores", supply)
	}
	n.Cards[0].Cordon = n.Cards[1].Cordon
	if why, category := l.NeverFits(wholeCard()); why != "" {
		t.Errorf("a whole-card request on cordoned cards never fits (%s: %s), want it left to wait", category, why)
	}
}
