package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// AnnotationMIGInstances holds the MIG instances of a node's cards in MIG mode (see
// NodeMIGInstances), written by the node agent; absent when no card is in MIG mode.
const AnnotationMIGInstances = Prefix + "mig-instances"

// MIGInstancesVersion is the version of NodeMIGInstances this build writes and reads.
const MIGInstancesVersion = "v1"

// Bounds of NodeMIGInstances. A card has 8 memory slices and at most 7 GPU
// instances; the limits leave room for other layouts without letting a document grow
// without end.
const (
	maxMIGCards            = 256
	maxMIGInstancesPerCard = 64
	maxMIGSlots            = 64
	maxMIGInstanceID       = 255
)

// MIGInstance is one MIG device: a compute instance inside a GPU instance, which is
// what a container is given.
type MIGInstance struct {
	// UUID is the MIG device's UUID ("MIG-...").
	UUID string `json:"uuid"`
	// Profile is the GPU instance profile as nvidia-smi names it, e.g. "3g.40gb" or
	// "1g.10gb+me".
	Profile string `json:"profile"`
	GI      int    `json:"gi"`
	CI      int    `json:"ci"`
	// Start and Size place the GPU instance on the card's memory slices, as NVML's
	// GpuInstancePlacement does.
	Start     int   `json:"start"`
	Size      int   `json:"size"`
	MemoryMiB int64 `json:"memoryMiB"`
	// SMCount is the compute instance's multiprocessors; 0 when unknown.
	SMCount int `json:"smCount,omitempty"`
}

// NodeMIGInstances is the MIG layout of a node's cards. It travels in its own
// annotation, beside the inventory, so that a scheduler that predates it (and decodes
// the inventory strictly) reads the inventory as before and never sees it.
type NodeMIGInstances struct {
	Version string `json:"version"`
	// Cards maps a card's UUID to its MIG instances, in NVML's MIG device order; an
	// empty list is a card in MIG mode with no instance.
	Cards map[string][]MIGInstance `json:"cards"`
}

// EncodeMIGInstances validates and serialises a node's MIG instances.
func EncodeMIGInstances(m *NodeMIGInstances) (string, error) {
	if m.Version == "" {
		m.Version = MIGInstancesVersion
	}
	if m.Cards == nil {
		m.Cards = map[string][]MIGInstance{}
	}
	if err := m.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode MIG instances: %w", err)
	}
	return string(b), nil
}

// DecodeMIGInstances parses and validates the AnnotationMIGInstances value.
func DecodeMIGInstances(s string) (*NodeMIGInstances, error) {
	key := AnnotationMIGInstances
	if err := checkVersion(s, key, MIGInstancesVersion); err != nil {
		return nil, err
	}
	var m NodeMIGInstances
	if err := decodeStrict(s, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if m.Cards == nil {
		return nil, fmt.Errorf("%w: %s: cards: missing or null", ErrInvalid, key)
	}
	for uuid, list := range m.Cards {
		if list == nil {
			// One form for "no instance", so that a document re-encodes to itself.
			m.Cards[uuid] = []MIGInstance{}
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate reports the first problem in a node's MIG instances, naming the field.
func (m *NodeMIGInstances) Validate() error {
	key := AnnotationMIGInstances
	if m.Version != MIGInstancesVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, m.Version, MIGInstancesVersion)
	}
	if len(m.Cards) > maxMIGCards {
		return fmt.Errorf("%w: %s: cards: %d entries (at most %d)", ErrInvalid, key, len(m.Cards), maxMIGCards)
	}
	seen := map[string]string{}
	// In UUID order, so that of several bad entries the same one is reported every time.
	for _, card := range slices.Sorted(maps.Keys(m.Cards)) {
		if err := validateUUID(card); err != nil {
			return fmt.Errorf("%w: %s: cards: uuid %v", ErrInvalid, key, err)
		}
		list := m.Cards[card]
		if len(list) > maxMIGInstancesPerCard {
			return fmt.Errorf("%w: %s: cards[%q]: %d instances (at most %d)", ErrInvalid, key, card, len(list), maxMIGInstancesPerCard)
		}
		for i, in := range list {
			field := fmt.Sprintf("%s: cards[%q][%d]", key, card, i)
			if err := in.validate(field); err != nil {
				return err
			}
			if prev, dup := seen[in.UUID]; dup {
				return fmt.Errorf("%w: %s.uuid: %q repeats %s", ErrInvalid, field, in.UUID, prev)
			}
			seen[in.UUID] = field
			if err := checkMIGNeighbours(field, in, list[:i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (in MIGInstance) validate(field string) error {
	if err := validateUUID(in.UUID); err != nil {
		return fmt.Errorf("%w: %s.uuid: %v", ErrInvalid, field, err)
	}
	if err := ValidateMIGProfileName(in.Profile); err != nil {
		return fmt.Errorf("%w: %s.profile: %v", ErrInvalid, field, err)
	}
	switch {
	case in.GI < 0 || in.GI > maxMIGInstanceID:
		return fmt.Errorf("%w: %s.gi: %d is outside 0..%d", ErrInvalid, field, in.GI, maxMIGInstanceID)
	case in.CI < 0 || in.CI > maxMIGInstanceID:
		return fmt.Errorf("%w: %s.ci: %d is outside 0..%d", ErrInvalid, field, in.CI, maxMIGInstanceID)
	case in.Start < 0 || in.Start >= maxMIGSlots:
		return fmt.Errorf("%w: %s.start: %d is outside 0..%d", ErrInvalid, field, in.Start, maxMIGSlots-1)
	case in.Size < 1 || in.Start+in.Size > maxMIGSlots:
		return fmt.Errorf("%w: %s.size: %d from start %d leaves the %d slots", ErrInvalid, field, in.Size, in.Start, maxMIGSlots)
	case in.MemoryMiB <= 0:
		return fmt.Errorf("%w: %s.memoryMiB: %d must be positive", ErrInvalid, field, in.MemoryMiB)
	case in.SMCount < 0:
		return fmt.Errorf("%w: %s.smCount: %d is negative", ErrInvalid, field, in.SMCount)
	}
	return nil
}

// checkMIGNeighbours checks one instance against those listed before it on the same
// card: compute instances of one GPU instance share its profile and placement, and
// two GPU instances never share a memory slice.
func checkMIGNeighbours(field string, in MIGInstance, before []MIGInstance) error {
	for j, o := range before {
		switch {
		case o.GI == in.GI && o.CI == in.CI:
			return fmt.Errorf("%w: %s: gi %d ci %d repeats entry %d", ErrInvalid, field, in.GI, in.CI, j)
		case o.GI == in.GI && (o.Profile != in.Profile || o.Start != in.Start || o.Size != in.Size):
			return fmt.Errorf("%w: %s: gi %d is %s at %d+%d here but %s at %d+%d in entry %d",
				ErrInvalid, field, in.GI, in.Profile, in.Start, in.Size, o.Profile, o.Start, o.Size, j)
		case o.GI != in.GI && in.Start < o.Start+o.Size && o.Start < in.Start+in.Size:
			return fmt.Errorf("%w: %s: slots %d+%d overlap gi %d at %d+%d (entry %d)",
				ErrInvalid, field, in.Start, in.Size, o.GI, o.Start, o.Size, j)
		}
	}
	return nil
}

// ValidateMIGProfileName accepts NVIDIA's profile names: "<compute slices>g.<GB>gb",
// optionally followed by a media-engine suffix: "+" or "-" and lowercase words joined
// by dots ("1g.10gb+me", "1g.24gb+me.all", "1g.24gb-me", "1g.24gb+gfx").
func ValidateMIGProfileName(name string) error {
	bad := func() error { return fmt.Errorf("%q is not a MIG profile name like 3g.40gb or 1g.10gb+me", name) }
	cut := strings.IndexAny(name, "+-")
	base, suffix := name, ""
	if cut >= 0 {
		base, suffix = name[:cut], name[cut+1:]
		if len(suffix) > 12 {
			return bad()
		}
		for _, w := range strings.Split(suffix, ".") {
			if w == "" || strings.TrimFunc(w, func(r rune) bool { return r >= 'a' && r <= 'z' }) != "" {
				return bad()
			}
		}
	}
	g, mem, ok := strings.Cut(base, "g.")
	if !ok || !strings.HasSuffix(mem, "gb") {
		return bad()
	}
	for _, n := range []string{g, strings.TrimSuffix(mem, "gb")} {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 || v > 9999 || n[0] < '1' || n[0] > '9' {
			return bad()
		}
	}
	return nil
}

// MIGInstances is what the agent publishes beside the inventory: the instances of
// each card in MIG mode whose layout was read; nil when there is none, and the
// annotation is then left off the node.
func (inv *NodeInventory) MIGInstances() *NodeMIGInstances {
	var m *NodeMIGInstances
	for _, c := range inv.Cards {
		if !c.MIG || c.MIGInstances == nil {
			continue
		}
		if m == nil {
			m = &NodeMIGInstances{Version: MIGInstancesVersion, Cards: map[string][]MIGInstance{}}
		}
		m.Cards[c.UUID] = append([]MIGInstance{}, c.MIGInstances...)
	}
	return m
}

// WithMIGInstances returns the inventory with each card's MIG instances read from m;
// a UUID of m that names no card is ignored. The inventory itself is not changed (the
// readers' memo shares it), and it is returned as is when m sets nothing.
func (inv *NodeInventory) WithMIGInstances(m *NodeMIGInstances) *NodeInventory {
	if m == nil || len(m.Cards) == 0 {
		return inv
	}
	out := *inv
	out.Cards = append([]Card(nil), inv.Cards...)
	for i := range out.Cards {
		if list, ok := m.Cards[out.Cards[i].UUID]; ok {
			out.Cards[i].MIGInstances = append([]MIGInstance{}, list...)
		}
	}
	return &out
}
