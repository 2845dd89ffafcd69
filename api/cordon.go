package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// CordonsVersion is the version of NodeCordons this build writes and reads.
const CordonsVersion = "v1"

// Bounds of NodeCordons: a node has far fewer cards than the entries allowed, and a
// reason is a line for a table and a pod condition, not a runbook.
const (
	MaxCordonReasonBytes = 256
	maxCordonedCards     = 256
)

// NodeCordons is what an administrator has taken out of service on a node, card by
// card (AnnotationCordonedCards): a cordoned card takes no new vGPU task, and the pods
// on it keep running. The CLI's cordon and uncordon write it; the node agent never does.
type NodeCordons struct {
	Version string `json:"version"`
	// Cards maps a card's UUID to its cordon.
	Cards map[string]CardCordon `json:"cards"`
}

// CardCordon is one card's cordon: why, in the administrator's words, and since when.
type CardCordon struct {
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// cordonsWire keeps each field as written, so that an error can quote it.
type cordonsWire struct {
	Version string                `json:"version"`
	Cards   map[string]cordonWire `json:"cards"`
}

type cordonWire struct {
	Reason json.RawMessage `json:"reason,omitempty"`
	Since  json.RawMessage `json:"since"`
}

// EncodeCordons validates and serialises a node's cordons; times are written in UTC.
func EncodeCordons(c *NodeCordons) (string, error) {
	if c.Version == "" {
		c.Version = CordonsVersion
	}
	if c.Cards == nil {
		c.Cards = map[string]CardCordon{}
	}
	if err := c.Validate(); err != nil {
		return "", err
	}
	w := struct {
		Version string                `json:"version"`
		Cards   map[string]cordonText `json:"cards"`
	}{Version: c.Version, Cards: make(map[string]cordonText, len(c.Cards))}
	for uuid, cc := range c.Cards {
		w.Cards[uuid] = cordonText{Reason: cc.Reason, Since: cc.Since.UTC().Format(time.RFC3339Nano)}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("encode cordons: %w", err)
	}
	return string(b), nil
}

type cordonText struct {
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
}

// DecodeCordons parses and validates the AnnotationCordonedCards value.
func DecodeCordons(s string) (*NodeCordons, error) {
	key := AnnotationCordonedCards
	if err := checkVersion(s, key, CordonsVersion); err != nil {
		return nil, err
	}
	var w cordonsWire
	if err := decodeStrict(s, &w); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if len(w.Cards) > maxCordonedCards {
		return nil, fmt.Errorf("%w: %s: cards: %d entries (at most %d)", ErrInvalid, key, len(w.Cards), maxCordonedCards)
	}
	c := &NodeCordons{Version: w.Version, Cards: make(map[string]CardCordon, len(w.Cards))}
	// In UUID order, so that of several bad entries the same one is reported every time.
	for _, uuid := range slices.Sorted(maps.Keys(w.Cards)) {
		if err := validateUUID(uuid); err != nil {
			return nil, fmt.Errorf("%w: %s: cards: uuid %v", ErrInvalid, key, err)
		}
		e := w.Cards[uuid]
		var cc CardCordon
		if e.Reason != nil {
			if err := json.Unmarshal(e.Reason, &cc.Reason); err != nil || string(e.Reason) == "null" {
				return nil, fmt.Errorf("%w: %s: cards[%q].reason: %s is not a string", ErrInvalid, key, uuid, quoteRaw(e.Reason))
			}
		}
		if e.Since == nil {
			return nil, fmt.Errorf("%w: %s: cards[%q].since: missing", ErrInvalid, key, uuid)
		}
		var since string
		t, err := time.Time{}, json.Unmarshal(e.Since, &since)
		if err == nil {
			t, err = time.Parse(time.RFC3339, since)
		}
		if err != nil || string(e.Since) == "null" {
			return nil, fmt.Errorf("%w: %s: cards[%q].since: %s is not an RFC 3339 time", ErrInvalid, key, uuid, quoteRaw(e.Since))
		}
		cc.Since = t.UTC()
		c.Cards[uuid] = cc
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate reports the first problem in a node's cordons, naming the field.
func (c *NodeCordons) Validate() error {
	key := AnnotationCordonedCards
	if c.Version != CordonsVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, c.Version, CordonsVersion)
	}
	if len(c.Cards) > maxCordonedCards {
		return fmt.Errorf("%w: %s: cards: %d entries (at most %d)", ErrInvalid, key, len(c.Cards), maxCordonedCards)
	}
	for _, uuid := range slices.Sorted(maps.Keys(c.Cards)) {
		if err := validateUUID(uuid); err != nil {
			return fmt.Errorf("%w: %s: cards: uuid %v", ErrInvalid, key, err)
		}
		cc := c.Cards[uuid]
		if err := ValidateCordonReason(cc.Reason); err != nil {
			return fmt.Errorf("%w: %s: cards[%q].reason: %v", ErrInvalid, key, uuid, err)
		}
		if cc.Since.IsZero() {
			return fmt.Errorf("%w: %s: cards[%q].since: missing (the zero time)", ErrInvalid, key, uuid)
		}
		if y := cc.Since.UTC().Year(); y < 0 || y > 9999 {
			return fmt.Errorf("%w: %s: cards[%q].since: year %d is outside 0..9999", ErrInvalid, key, uuid, y)
		}
	}
	return nil
}

// ValidateCordonReason checks a reason as the codec will: UTF-8, at most
// MaxCordonReasonBytes, no control characters (it is printed in tables, logs and pod
// conditions). The CLI asks it before it writes.
func ValidateCordonReason(r string) error {
	switch {
	case len(r) > MaxCordonReasonBytes:
		return fmt.Errorf("%q is %d bytes (at most %d)", r[:32]+"...", len(r), MaxCordonReasonBytes)
	case !utf8.ValidString(r):
		return fmt.Errorf("%q is not UTF-8", r)
	case strings.ContainsFunc(r, unicode.IsControl):
		return fmt.Errorf("%q contains a control character", r)
	}
	return nil
}

// quoteRaw is a JSON value as written, cut short for an error message.
func quoteRaw(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return s
}

// WithCordons returns the inventory with each card's cordon read from c; a UUID of c
// that names no card is ignored. The inventory itself is not changed (the readers' memo
// shares it), and it is returned as is when c cordons nothing.
func (inv *NodeInventory) WithCordons(c *NodeCordons) *NodeInventory {
	if c == nil || len(c.Cards) == 0 {
		return inv
	}
	out := *inv
	out.Cards = append([]Card(nil), inv.Cards...)
	for i := range out.Cards {
		if cc, ok := c.Cards[out.Cards[i].UUID]; ok {
			out.Cards[i].Cordon = &cc
		}
	}
	return &out
}
