package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// ContextReserveVersion is the version of NodeContextReserve this build writes and reads.
const ContextReserveVersion = "v1"

// Bounds of NodeContextReserve: the agent's contextReserve is 0..4Gi, and a node has
// far fewer cards than the entries allowed.
const (
	MaxContextReserveMiB   = 4096
	maxContextReserveCards = 256
)

// NodeContextReserve is what one CUDA context takes on each of a node's cards, which
// vgpu-core counts inside every container's memory limit there. It travels in its own
// annotation, beside the inventory, so that a scheduler that predates it reads the
// inventory as before and never sees it.
type NodeContextReserve struct {
	Version string `json:"version"`
	// Cards maps a card's UUID to its reserve in MiB; a card left out, or 0, is unknown.
	Cards map[string]int64 `json:"cards"`
}

// contextReserveWire keeps each reserve as written, so that an error can quote it.
type contextReserveWire struct {
	Version string                     `json:"version"`
	Cards   map[string]json.RawMessage `json:"cards"`
}

// EncodeContextReserve validates and serialises a node's context reserves.
func EncodeContextReserve(r *NodeContextReserve) (string, error) {
	if r.Version == "" {
		r.Version = ContextReserveVersion
	}
	if r.Cards == nil {
		r.Cards = map[string]int64{}
	}
	if err := r.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode context reserve: %w", err)
	}
	return string(b), nil
}

// DecodeContextReserve parses and validates the AnnotationContextReserve value.
func DecodeContextReserve(s string) (*NodeContextReserve, error) {
	key := AnnotationContextReserve
	if err := checkVersion(s, key, ContextReserveVersion); err != nil {
		return nil, err
	}
	var w contextReserveWire
	if err := decodeStrict(s, &w); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if len(w.Cards) > maxContextReserveCards {
		return nil, fmt.Errorf("%w: %s: cards: %d entries (at most %d)", ErrInvalid, key, len(w.Cards), maxContextReserveCards)
	}
	r := &NodeContextReserve{Version: w.Version, Cards: make(map[string]int64, len(w.Cards))}
	// In UUID order, so that of several bad entries the same one is reported every time.
	for _, uuid := range slices.Sorted(maps.Keys(w.Cards)) {
		if err := validateUUID(uuid); err != nil {
			return nil, fmt.Errorf("%w: %s: cards: uuid %v", ErrInvalid, key, err)
		}
		raw := string(w.Cards[uuid])
		mib, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			if len(raw) > 32 {
				raw = raw[:32] + "..."
			}
			return nil, fmt.Errorf("%w: %s: cards[%q]: %s is not a whole number of MiB", ErrInvalid, key, uuid, raw)
		}
		r.Cards[uuid] = mib
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// Validate reports the first problem in a node's context reserves, naming the field.
func (r *NodeContextReserve) Validate() error {
	key := AnnotationContextReserve
	if r.Version != ContextReserveVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, r.Version, ContextReserveVersion)
	}
	if len(r.Cards) > maxContextReserveCards {
		return fmt.Errorf("%w: %s: cards: %d entries (at most %d)", ErrInvalid, key, len(r.Cards), maxContextReserveCards)
	}
	for _, uuid := range slices.Sorted(maps.Keys(r.Cards)) {
		if err := validateUUID(uuid); err != nil {
			return fmt.Errorf("%w: %s: cards: uuid %v", ErrInvalid, key, err)
		}
		if mib := r.Cards[uuid]; mib < 0 || mib > MaxContextReserveMiB {
			return fmt.Errorf("%w: %s: cards[%q]: %d MiB is outside 0..%d", ErrInvalid, key, uuid, mib, MaxContextReserveMiB)
		}
	}
	return nil
}

// ContextReserve is what the agent publishes beside the inventory: each card's
// reserve, cards without one left out; nil when no card has one, and the annotation
// is then left off the node.
func (inv *NodeInventory) ContextReserve() *NodeContextReserve {
	var r *NodeContextReserve
	for _, c := range inv.Cards {
		if c.ContextReserveMiB == 0 {
			continue
		}
		if r == nil {
			r = &NodeContextReserve{Version: ContextReserveVersion, Cards: map[string]int64{}}
		}
		r.Cards[c.UUID] = c.ContextReserveMiB
	}
	return r
}

// WithContextReserve returns the inventory with each card's reserve read from r; a
// UUID of r that names no card is ignored. The inventory itself is not changed (the
// readers' memo shares it), and it is returned as is when r sets nothing.
func (inv *NodeInventory) WithContextReserve(r *NodeContextReserve) *NodeInventory {
	if r == nil || len(r.Cards) == 0 {
		return inv
	}
	out := *inv
	out.Cards = append([]Card(nil), inv.Cards...)
	for i := range out.Cards {
		out.Cards[i].ContextReserveMiB = r.Cards[out.Cards[i].UUID]
	}
	return &out
}
