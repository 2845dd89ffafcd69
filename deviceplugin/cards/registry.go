// Package cards holds the node agent's live view of its cards: what discovery found,
// which cards are healthy now, and the kubelet slot IDs derived from them. The kubelet
// server, the inventory publisher and the metrics all read this one view.
package cards

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/tessera-gpu/tessera/api"
)

// ErrSameCardTwice is wrapped when one container's slots name a card more than once.
var ErrSameCardTwice = errors.New("one container got two slots of the same card")

// Slot is one virtual device the kubelet sees: a share of a card.
type Slot struct {
	ID      string
	UUID    string
	Healthy bool
	// NUMA is the card's NUMA node, -1 when unknown.
	NUMA int
}

// Registry is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	cards   []api.Card
	byUUID  map[string]int
	reasons map[string]string
	links   [][]api.LinkType
	subs    map[int]chan struct{}
	nextSub int
}

// NewRegistry takes ownership of cards (in NVML index order) and links.
func NewRegistry(cards []api.Card, links [][]api.LinkType) *Registry {
	r := &Registry{cards: cards, links: links, byUUID: make(map[string]int, len(cards)),
		reasons: map[string]string{}, subs: map[int]chan struct{}{}}
	for i, c := range cards {
		r.byUUID[c.UUID] = i
	}
	return r
}

// Inventory returns a copy of the node inventory as it stands.
func (r *Registry) Inventory() *api.NodeInventory {
	r.mu.RLock()
	defer r.mu.RUnlock()
	inv := &api.NodeInventory{Version: api.InventoryVersion, Cards: append([]api.Card(nil), r.cards...)}
	if r.links != nil {
		inv.Links = make([][]api.LinkType, len(r.links))
		for i := range r.links {
			inv.Links[i] = append([]api.LinkType(nil), r.links[i]...)
		}
	}
	return inv
}

// Card returns the card with this UUID.
func (r *Registry) Card(uuid string) (api.Card, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	i, ok := r.byUUID[uuid]
	if !ok {
		return api.Card{}, false
	}
	return r.cards[i], true
}

// UnhealthyReason says why a card is unhealthy; empty when it is healthy.
func (r *Registry) UnhealthyReason(uuid string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.reasons[uuid]
}

// SetHealth records a card's health and notifies subscribers when it changed.
func (r *Registry) SetHealth(uuid string, healthy bool, reason string) bool {
	r.mu.Lock()
	i, ok := r.byUUID[uuid]
	if !ok || r.cards[i].Healthy == healthy {
		r.mu.Unlock()
		return false
	}
	r.cards[i].Healthy = healthy
	if healthy {
		delete(r.reasons, uuid)
	} else {
		r.reasons[uuid] = reason
	}
	r.notifyAndUnlock()
	return true
}

// notifyAndUnlock releases r.mu, which the caller holds after changing a card, and then
// tells every subscriber. Notifications coalesce: one already pending is enough, since
// the reader sees the latest state.
func (r *Registry) notifyAndUnlock() {
	subs := make([]chan struct{}, 0, len(r.subs))
	for _, ch := range r.subs {
		subs = append(subs, ch)
	}
	r.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Subscribe returns a channel that receives a value after each health change, and a
// function that ends the subscription. Notifications coalesce: read the state anew.
func (r *Registry) Subscribe() (<-chan struct{}, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.nextSub
	r.nextSub++
	ch := make(chan struct{}, 1)
	r.subs[id] = ch
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.subs, id)
	}
}

// Slots lists every virtual device: Shares slots per card, in card index order.
func (r *Registry) Slots() []Slot {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Slot
	for _, c := range r.cards {
		for k := 0; k < c.Shares; k++ {
			out = append(out, Slot{ID: SlotID(c.UUID, k), UUID: c.UUID, Healthy: c.Healthy, NUMA: c.NUMA})
		}
	}
	return out
}

// CardsForSlots maps one container's slot IDs to its cards, in NVML index order (which
// is the CUDA ordinal order the agent sets up). Unknown slots and two slots of one card
// are errors: the kubelet chose them, so the container cannot be set up from them.
func (r *Registry) CardsForSlots(ids []string) ([]api.Card, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := make(map[string]string, len(ids))
	out := make([]api.Card, 0, len(ids))
	for _, id := range ids {
		uuid, k, err := ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		i, ok := r.byUUID[uuid]
		if !ok || k >= r.cards[i].Shares {
			return nil, fmt.Errorf("%w: %q is not advertised by this node", ErrUnknownSlot, id)
		}
		if prev, dup := seen[uuid]; dup {
			return nil, fmt.Errorf("%w: %q and %q are both on card %s", ErrSameCardTwice, prev, id, uuid)
		}
		seen[uuid] = id
		out = append(out, r.cards[i])
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out, nil
}
