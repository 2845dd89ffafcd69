package cards

import (
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// The kubelet hands these IDs back in Allocate and PreStartContainer; a node agent
// must turn any of them into cards or refuse it, naming it.

const (
	uuidA = "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
	uuidB = "GPU-0a4e1b62-9c7d-4f3e-8a21-6d5b3c9e7f10"
	uuidC = "GPU-e1f2a3b4-c5d6-e7f8-a9b0-c1d2e3f4a5b6"
	uuidM = "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0"
)

// SlotID and ParseSlotID round-trip for any card name and share index: the slot
// index follows the last separator, so even a name holding one splits back.
func FuzzSlotID(f *testing.F) {
	for _, u := range []string{uuidA, uuidM, "GPU-a", "a::b", "x:", ":"} {
		f.Add(u, 0)
		f.Add(u, 9)
	}
	f.Fuzz(func(t *testing.T, uuid string, k int) {
		if uuid == "" || k < 0 {
			return
		}
		id := SlotID(uuid, k)
		u, kk, err := ParseSlotID(id)
		if err != nil || u != uuid || kk != k {
			t.Fatalf("SlotID(%q, %d) = %q parses as %q, %d, %v", uuid, k, id, u, kk, err)
		}
	})
}

// ParseSlotID refuses an ID with ErrUnknownSlot, quoting it, or splits it into a
// non-empty card name and an index that format back to an ID naming the same share.
func FuzzParseSlotID(f *testing.F) {
	for _, s := range []string{SlotID(uuidA, 0), SlotID(uuidB, 9), SlotID(uuidM, 3), "GPU-a::",
		"::1", "GPU-a", "GPU-a::-1", "GPU-a::+1", "GPU-a::01", "GPU-a::1::2", "GPU-a:::1",
		"GPU-a::99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		uuid, k, err := ParseSlotID(id)
		if err != nil {
			if !errors.Is(err, ErrUnknownSlot) || !strings.Contains(err.Error(), strconv.Quote(id)) {
				t.Fatalf("error for %q does not wrap ErrUnknownSlot and quote the ID: %v", id, err)
			}
			return
		}
		if uuid == "" || k < 0 || !strings.HasPrefix(id, uuid+slotSeparator) {
			t.Fatalf("%q parses as %q, %d", id, uuid, k)
		}
		// Only the spelling the agent advertises parses: formatted back, it is the same ID.
		if canon := SlotID(uuid, k); canon != id {
			t.Fatalf("%q parses as %q, %d, which the agent writes %q", id, uuid, k, canon)
		}
	})
}

func fuzzRegistry() *Registry {
	return NewRegistry([]api.Card{
		{UUID: uuidA, Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 4, Healthy: true},
		{UUID: uuidB, Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 1, Healthy: true},
		{UUID: uuidC, Index: 2, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 10, Healthy: false},
	}, nil)
}

// CardsForSlots takes one container's IDs (one a line here) and either returns one
// card for each, distinct and in index order, exactly when every ID names an
// advertised share and no two name one card; or refuses with ErrUnknownSlot or
// ErrSameCardTwice, quoting an ID it was given. It changes nothing in the registry.
func FuzzCardsForSlots(f *testing.F) {
	f.Add(SlotID(uuidA, 0))
	f.Add(SlotID(uuidC, 9) + "\n" + SlotID(uuidA, 3) + "\n" + SlotID(uuidB, 0))
	f.Add(SlotID(uuidA, 0) + "\n" + SlotID(uuidA, 1))
	f.Add(SlotID(uuidA, 4))
	f.Add(SlotID(uuidB, 1))
	f.Add(SlotID(uuidA, 0) + "\n" + uuidB)
	f.Add(SlotID("GPU-unknown", 0))
	f.Add(uuidA + "::+2\n" + uuidB + "::00")
	f.Add("")
	r := fuzzRegistry()
	before := r.Inventory()
	f.Fuzz(func(t *testing.T, s string) {
		ids := strings.Split(s, "\n")
		// What the answer must be, from the IDs alone.
		wantErr := error(nil)
		seen := map[string]bool{}
		for _, id := range ids {
			uuid, k, err := ParseSlotID(id)
			c, known := r.Card(uuid)
			if err != nil || !known || k >= c.Shares {
				wantErr = ErrUnknownSlot
			} else if seen[uuid] {
				wantErr = ErrSameCardTwice
			}
			if wantErr != nil {
				break // the first bad ID is the one refused
			}
			seen[uuid] = true
		}
		got, err := r.CardsForSlots(ids)
		if !reflect.DeepEqual(r.Inventory(), before) {
			t.Fatalf("CardsForSlots(%q) changed the registry", ids)
		}
		if err != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("CardsForSlots(%q): %v, want %v", ids, err, wantErr)
			}
			quoted := false
			for _, id := range ids {
				quoted = quoted || strings.Contains(err.Error(), strconv.Quote(id))
			}
			if !quoted {
				t.Fatalf("CardsForSlots(%q): %v quotes none of its IDs", ids, err)
			}
			return
		}
		if wantErr != nil {
			t.Fatalf("CardsForSlots(%q) = %d cards, want %v", ids, len(got), wantErr)
		}
		if len(got) != len(ids) {
			t.Fatalf("CardsForSlots(%q) = %d cards for %d IDs", ids, len(got), len(ids))
		}
		if !sort.SliceIsSorted(got, func(a, b int) bool { return got[a].Index < got[b].Index }) {
			t.Fatalf("CardsForSlots(%q) is not in index order", ids)
		}
		for i, c := range got {
			if !seen[c.UUID] || i > 0 && got[i-1].UUID == c.UUID {
				t.Fatalf("CardsForSlots(%q) = %+v: card %s twice or not asked for", ids, got, c.UUID)
			}
		}
	})
}
