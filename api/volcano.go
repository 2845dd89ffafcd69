package api

import (
	"fmt"
	"strconv"
	"strings"
)

// VolcanoCard is one entry of the volcano.sh/node-vgpu-register annotation written
// by the HAMi volcano device plugin: "UUID,count,memMiB,type,health[,mode]".
type VolcanoCard struct {
	UUID      string
	Count     int
	MemoryMiB int64
	Type      string
	Healthy   bool
	Mode      string
}

// DecodeVolcanoNodeRegister parses the volcano.sh/node-vgpu-register value. Entries
// are joined by ':' and a trailing ':' is allowed; an empty entry elsewhere is an error.
func DecodeVolcanoNodeRegister(s string) ([]VolcanoCard, error) {
	key := VolcanoNodeRegister
	s = strings.TrimSuffix(s, ":")
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: %s: no cards", ErrInvalid, key)
	}
	entries := strings.Split(s, ":")
	cards := make([]VolcanoCard, 0, len(entries))
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		f := strings.Split(e, ",")
		if len(f) != 5 && len(f) != 6 {
			return nil, fmt.Errorf("%w: %s: entry %d %q has %d fields, want UUID,count,memMiB,type,health[,mode]", ErrInvalid, key, i, e, len(f))
		}
		c := VolcanoCard{UUID: f[0], Type: f[3]}
		if err := validateUUID(c.UUID); err != nil {
			return nil, fmt.Errorf("%w: %s: entry %d uuid: %v", ErrInvalid, key, i, err)
		}
		if j, dup := seen[c.UUID]; dup {
			return nil, fmt.Errorf("%w: %s: entry %d uuid %q repeats entry %d", ErrInvalid, key, i, c.UUID, j)
		}
		seen[c.UUID] = i
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %s: entry %d count %q: want a positive integer", ErrInvalid, key, i, f[1])
		}
		c.Count = n
		m, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || m < 1 {
			return nil, fmt.Errorf("%w: %s: entry %d memory %q: want a positive integer (MiB)", ErrInvalid, key, i, f[2])
		}
		c.MemoryMiB = m
		if c.Type == "" || strings.ContainsAny(c.Type, ";") {
			return nil, fmt.Errorf("%w: %s: entry %d type %q: want a model name", ErrInvalid, key, i, f[3])
		}
		h, err := strconv.ParseBool(f[4])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: entry %d health %q: want true or false", ErrInvalid, key, i, f[4])
		}
		c.Healthy = h
		if len(f) == 6 {
			if strings.ContainsAny(f[5], ";") {
				return nil, fmt.Errorf("%w: %s: entry %d mode %q contains ';'", ErrInvalid, key, i, f[5])
			}
			c.Mode = f[5]
		}
		cards = append(cards, c)
	}
	return cards, nil
}

// EncodeVolcanoNodeRegister writes cards in the volcano.sh/node-vgpu-register grammar.
func EncodeVolcanoNodeRegister(cards []VolcanoCard) (string, error) {
	var b strings.Builder
	for i, c := range cards {
		if err := validateUUID(c.UUID); err != nil {
			return "", fmt.Errorf("%w: %s: card %d uuid: %v", ErrInvalid, VolcanoNodeRegister, i, err)
		}
		if c.Type == "" || strings.ContainsAny(c.Type, ",:;") || strings.ContainsAny(c.Mode, ",:;") {
			return "", fmt.Errorf("%w: %s: card %d type %q or mode %q contains a separator", ErrInvalid, VolcanoNodeRegister, i, c.Type, c.Mode)
		}
		if c.Count < 1 || c.MemoryMiB < 1 {
			return "", fmt.Errorf("%w: %s: card %d: count %d and memory %d must be positive", ErrInvalid, VolcanoNodeRegister, i, c.Count, c.MemoryMiB)
		}
		fmt.Fprintf(&b, "%s,%d,%d,%s,%t", c.UUID, c.Count, c.MemoryMiB, c.Type, c.Healthy)
		if c.Mode != "" {
			b.WriteString("," + c.Mode)
		}
		b.WriteByte(':')
	}
	return b.String(), nil
}

// InventoryFromVolcano converts a HAMi registration into Tessera's inventory. The
// grammar carries no index, SM count, NUMA node or links: index is the entry order
// and NUMA is unknown.
func InventoryFromVolcano(cards []VolcanoCard) *NodeInventory {
	inv := &NodeInventory{Version: InventoryVersion, Cards: make([]Card, len(cards))}
	for i, c := range cards {
		inv.Cards[i] = Card{UUID: c.UUID, Index: i, Model: c.Type, MemoryMiB: c.MemoryMiB,
			NUMA: -1, Shares: c.Count, Healthy: c.Healthy}
	}
	return inv
}

// EncodeVolcanoPodDevices writes an assignment in the grammar of volcano.sh/vgpu-ids-new
// and volcano.sh/devices-to-allocate: each card "UUID,NVIDIA,memMiB,cores:", containers
// joined by ';', one entry per vGPU container in pod spec order.
func EncodeVolcanoPodDevices(a *PodAssignment) string {
	parts := make([]string, len(a.Containers))
	for i, c := range a.Containers {
		var b strings.Builder
		for _, card := range c.Cards {
			fmt.Fprintf(&b, "%s,%s,%d,%d:", card.UUID, VolcanoDeviceType, card.MemoryMiB, card.Cores)
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, ";")
}

// DecodeVolcanoPodDevices parses the volcano.sh/vgpu-ids-new grammar into per-container
// card lists (container names are not part of the grammar).
func DecodeVolcanoPodDevices(s string) ([][]CardAssignment, error) {
	key := VolcanoAssignedIDs
	if s == "" {
		return nil, fmt.Errorf("%w: %s: empty", ErrInvalid, key)
	}
	var out [][]CardAssignment
	for ci, cs := range strings.Split(s, ";") {
		var cards []CardAssignment
		entries := strings.Split(strings.TrimSuffix(cs, ":"), ":")
		if cs == "" {
			entries = nil
		}
		for ei, e := range entries {
			f := strings.Split(e, ",")
			if len(f) != 4 {
				return nil, fmt.Errorf("%w: %s: container %d card %d %q has %d fields, want UUID,type,memMiB,cores", ErrInvalid, key, ci, ei, e, len(f))
			}
			if err := validateUUID(f[0]); err != nil {
				return nil, fmt.Errorf("%w: %s: container %d card %d uuid: %v", ErrInvalid, key, ci, ei, err)
			}
			if f[1] != VolcanoDeviceType {
				return nil, fmt.Errorf("%w: %s: container %d card %d type %q, want %q", ErrInvalid, key, ci, ei, f[1], VolcanoDeviceType)
			}
			m, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || m < 0 {
				return nil, fmt.Errorf("%w: %s: container %d card %d memory %q: want a non-negative integer (MiB)", ErrInvalid, key, ci, ei, f[2])
			}
			c, err := strconv.Atoi(f[3])
			if err != nil || c < 0 || c > 100 {
				return nil, fmt.Errorf("%w: %s: container %d card %d cores %q: want 0..100", ErrInvalid, key, ci, ei, f[3])
			}
			cards = append(cards, CardAssignment{UUID: f[0], MemoryMiB: m, Cores: c})
		}
		out = append(out, cards)
	}
	return out, nil
}
