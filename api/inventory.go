package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// InventoryVersion is the version of NodeInventory this build writes and reads.
const InventoryVersion = "v1"

// NodeInventory is what the node agent publishes about a node's cards.
type NodeInventory struct {
	Version string `json:"version"`
	// Cards in NVML index order.
	Cards []Card `json:"cards"`
	// Links[i][j] is the connection between Cards[i] and Cards[j]; optional.
	Links [][]LinkType `json:"links,omitempty"`
}

// Card is one physical GPU as the node agent sees it.
type Card struct {
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	Model string `json:"model"`
	// MemoryMiB is the card's total device memory.
	MemoryMiB int64 `json:"memoryMiB"`
	// SMCount is the number of streaming multiprocessors; 0 when unknown.
	SMCount int `json:"smCount,omitempty"`
	// NUMA is the card's NUMA node; -1 when unknown.
	NUMA int `json:"numa"`
	// Shares is how many containers may use the card at once.
	Shares  int  `json:"shares"`
	Healthy bool `json:"healthy"`
	MIG     bool `json:"mig,omitempty"`
	// ContextReserveMiB is what one CUDA context takes on the card, counted inside
	// every container's memory limit there (the agent's contextReserve); 0 when
	// unknown. It is not part of the inventory document, which must stay what older
	// schedulers decode strictly: it travels in AnnotationContextReserve, and the
	// readers (Decoders.NodeInventory) fill it in.
	ContextReserveMiB int64 `json:"-"`
	// Cordon is set when an administrator has cordoned the card: it takes no new
	// task. Like the reserve it is not part of the inventory document: it travels in
	// AnnotationCordonedCards, which the readers apply.
	Cordon *CardCordon `json:"-"`
	// MIGInstances are the MIG devices of a card in MIG mode, in NVML's order; nil
	// when not read. Like the reserve they travel beside the inventory document, in
	// AnnotationMIGInstances (see NodeMIGInstances), so that a reader of the previous
	// release still decodes the inventory.
	MIGInstances []MIGInstance `json:"-"`
}

// LinkType is the connection between two cards, in nvidia-smi topo notation.
type LinkType string

// Link types, best first after NVLink. NVLink is written NV<count>, e.g. "NV12".
const (
	LinkSelf       LinkType = "X"    // the card itself
	LinkSameBoard  LinkType = "BRD"  // two GPUs on one board
	LinkPCIeSingle LinkType = "PIX"  // at most one PCIe switch
	LinkPCIeMulti  LinkType = "PXB"  // several PCIe switches, no host bridge
	LinkHostBridge LinkType = "PHB"  // through a PCIe host bridge
	LinkSameNUMA   LinkType = "NODE" // across host bridges within one NUMA node
	LinkCrossNUMA  LinkType = "SYS"  // across the CPU interconnect
)

// NVLinks returns the NVLink count of an "NV<n>" link, and whether it is one.
func (l LinkType) NVLinks() (int, bool) {
	s := string(l)
	if !strings.HasPrefix(s, "NV") || len(s) < 3 || len(s) > 4 {
		return 0, false
	}
	n := 0
	for _, c := range s[2:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n > 0
}

func (l LinkType) valid() bool {
	switch l {
	case LinkSelf, LinkSameBoard, LinkPCIeSingle, LinkPCIeMulti, LinkHostBridge, LinkSameNUMA, LinkCrossNUMA:
		return true
	}
	_, ok := l.NVLinks()
	return ok
}

// EncodeInventory validates and serialises an inventory.
func EncodeInventory(inv *NodeInventory) (string, error) {
	if inv.Version == "" {
		inv.Version = InventoryVersion
	}
	if err := inv.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return "", fmt.Errorf("encode inventory: %w", err)
	}
	return string(b), nil
}

// DecodeInventory parses and validates the AnnotationInventory value.
func DecodeInventory(s string) (*NodeInventory, error) {
	if err := checkVersion(s, AnnotationInventory, InventoryVersion); err != nil {
		return nil, err
	}
	var inv NodeInventory
	if err := decodeStrict(s, &inv); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, AnnotationInventory, err)
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	if len(inv.Links) == 0 {
		// "links": [] says what an absent matrix says; keep one form, so that an
		// inventory re-encodes to itself.
		inv.Links = nil
	}
	return &inv, nil
}

// Validate reports the first problem in an inventory, naming the field.
func (inv *NodeInventory) Validate() error {
	if inv.Version != InventoryVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, AnnotationInventory, inv.Version, InventoryVersion)
	}
	uuids := make(map[string]int, len(inv.Cards))
	for i, c := range inv.Cards {
		field := fmt.Sprintf("%s: cards[%d]", AnnotationInventory, i)
		if err := validateUUID(c.UUID); err != nil {
			return fmt.Errorf("%w: %s.uuid: %v", ErrInvalid, field, err)
		}
		if j, dup := uuids[c.UUID]; dup {
			return fmt.Errorf("%w: %s.uuid: %q repeats cards[%d]", ErrInvalid, field, c.UUID, j)
		}
		uuids[c.UUID] = i
		switch {
		case c.Index < 0:
			return fmt.Errorf("%w: %s.index: %d is negative", ErrInvalid, field, c.Index)
		case c.MemoryMiB <= 0:
			return fmt.Errorf("%w: %s.memoryMiB: %d must be positive", ErrInvalid, field, c.MemoryMiB)
		case c.SMCount < 0:
			return fmt.Errorf("%w: %s.smCount: %d is negative", ErrInvalid, field, c.SMCount)
		case c.NUMA < -1:
			return fmt.Errorf("%w: %s.numa: %d (want -1 for unknown, or a node number)", ErrInvalid, field, c.NUMA)
		case c.Shares < 1:
			return fmt.Errorf("%w: %s.shares: %d must be at least 1", ErrInvalid, field, c.Shares)
		case strings.ContainsAny(c.Model, ",:;"):
			return fmt.Errorf("%w: %s.model: %q contains a separator", ErrInvalid, field, c.Model)
		}
	}
	return validateLinks(inv.Links, len(inv.Cards))
}

func validateLinks(links [][]LinkType, n int) error {
	if links == nil {
		return nil
	}
	if len(links) != n {
		return fmt.Errorf("%w: %s: links has %d rows for %d cards", ErrInvalid, AnnotationInventory, len(links), n)
	}
	// Every row's length first: the symmetry check below reads links[j][i].
	for i, row := range links {
		if len(row) != n {
			return fmt.Errorf("%w: %s: links[%d] has %d entries for %d cards", ErrInvalid, AnnotationInventory, i, len(row), n)
		}
	}
	for i, row := range links {
		for j, l := range row {
			switch {
			case !l.valid():
				return fmt.Errorf("%w: %s: links[%d][%d]: unknown link type %q", ErrInvalid, AnnotationInventory, i, j, l)
			case (i == j) != (l == LinkSelf):
				return fmt.Errorf("%w: %s: links[%d][%d]: %q (X belongs on the diagonal only)", ErrInvalid, AnnotationInventory, i, j, l)
			case links[j][i] != l:
				return fmt.Errorf("%w: %s: links[%d][%d] is %q but links[%d][%d] is %q", ErrInvalid, AnnotationInventory, i, j, l, j, i, links[j][i])
			}
		}
	}
	return nil
}

// validateUUID accepts the identifiers NVML reports (GPU-..., MIG-...) and the
// shorter names tests and simulators use, but nothing that would break the
// comma/colon/semicolon grammars Tessera must also write.
func validateUUID(u string) error {
	if u == "" {
		return fmt.Errorf("empty")
	}
	if len(u) > 128 {
		return fmt.Errorf("%q is longer than 128 bytes", u[:32]+"...")
	}
	for _, r := range u {
		if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("%q contains %q", u, r)
		}
	}
	return nil
}

// decodeStrict unmarshals exactly one JSON value and rejects unknown fields, so a
// newer writer's additions are never silently dropped.
func decodeStrict(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the JSON document")
	}
	return nil
}

// checkVersion reads only the version field, so that a document from a newer
// writer is reported as such rather than as an unknown-field error.
func checkVersion(s, key, want string) error {
	var head struct {
		Version *string `json:"version"`
	}
	if err := json.Unmarshal([]byte(s), &head); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if head.Version == nil {
		return fmt.Errorf("%w: %s: missing version field", ErrInvalid, key)
	}
	if *head.Version != want {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, *head.Version, want)
	}
	return nil
}
