package book

import (
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// TestEvictionAnswerIsForgottenWhenTheNodeChanges: the per-node memo of "would the
// task fit once these victims are gone" answers only the same question about the same
// state of the node.
func TestEvictionAnswerIsForgottenWhenTheNodeChanges(t *testing.T) {
	l := NewLedger()
	l.AddNode(placement.NewNode("n1", &api.NodeInventory{Version: api.InventoryVersion}, 1))
	key := EvictKey{Request: 1, Victims: 42, Count: 2}
	if _, ok, _ := l.EvictAnswer("n1", key); ok {
		t.Fatal("an empty memo answered")
	}
	_, _, v := l.EvictAnswer("n1", key)
	l.RememberEvict("n1", key, v, EvictHelps)
	if answer, ok, _ := l.EvictAnswer("n1", key); !ok || answer != EvictHelps {
		t.Fatalf("the memo forgot its answer: %v, ok %v", answer, ok)
	}
	for name, other := range map[string]EvictKey{
		"another request":    {Request: 2, Victims: 42, Count: 2},
		"another victim set": {Request: 1, Victims: 7, Count: 2},
		"another queue":      {Request: 1, Queue: "q2", Victims: 42, Count: 2},
	} {
		if _, ok, _ := l.EvictAnswer("n1", other); ok {
			t.Errorf("the memo answered for %s", name)
		}
	}
	l.entries["n1"].version++
	if _, ok, _ := l.EvictAnswer("n1", key); ok {
		t.Error("the memo answered after the node's bookings changed")
	}
	if _, ok, _ := l.EvictAnswer("n2", key); ok {
		t.Error("the memo answered for a node it does not know")
	}
	l.RememberEvict("n2", key, 0, EvictHelps) // a node it does not know: nothing to keep
}
