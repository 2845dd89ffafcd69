package api

import (
	"encoding/json"
	"fmt"
	"strings"
)

// AssignmentVersion is the version of PodAssignment this build writes and reads.
const AssignmentVersion = "v1"

// PodAssignment is the scheduler's decision for one pod: which cards each vGPU
// container gets and how much of each. It travels on the Binding, so it reaches the
// API server together with the pod's node.
type PodAssignment struct {
	Version string `json:"version"`
	Node    string `json:"node"`
	// QoS is the pod's service class on shared cards.
	QoS QoSClass `json:"qos"`
	// Containers lists only the containers that requested vGPU resources, in pod spec order.
	Containers []ContainerAssignment `json:"containers"`
}

// ContainerAssignment is one container's share of its cards.
type ContainerAssignment struct {
	Name  string           `json:"name"`
	Cards []CardAssignment `json:"cards"`
}

// CardAssignment is one card and what the container may use of it.
type CardAssignment struct {
	UUID      string `json:"uuid"`
	MemoryMiB int64  `json:"memoryMiB"`
	// Cores is the percentage of the card's SMs; 100 means the whole card.
	Cores int `json:"cores"`
	// MIG, when set, is the UUID of the MIG device ("MIG-...") on card UUID that the
	// container gets whole: MemoryMiB is then that instance's memory and Cores is 100.
	// An agent of an earlier release decodes assignments strictly and refuses one
	// that carries it, rather than handing out the whole parent card.
	MIG string `json:"mig,omitempty"`
}

// IsMIG reports whether the card assignment is a whole MIG instance.
func (c CardAssignment) IsMIG() bool { return c.MIG != "" }

// Container returns the named container's assignment, or nil.
func (a *PodAssignment) Container(name string) *ContainerAssignment {
	for i := range a.Containers {
		if a.Containers[i].Name == name {
			return &a.Containers[i]
		}
	}
	return nil
}

// EncodeAssignment validates and serialises an assignment.
func EncodeAssignment(a *PodAssignment) (string, error) {
	if a.Version == "" {
		a.Version = AssignmentVersion
	}
	if err := a.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encode assignment: %w", err)
	}
	return string(b), nil
}

// DecodeAssignment parses and validates the AnnotationAssignment value.
func DecodeAssignment(s string) (*PodAssignment, error) {
	if err := checkVersion(s, AnnotationAssignment, AssignmentVersion); err != nil {
		return nil, err
	}
	var a PodAssignment
	if err := decodeStrict(s, &a); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, AnnotationAssignment, err)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Validate reports the first problem in an assignment, naming the field.
func (a *PodAssignment) Validate() error {
	key := AnnotationAssignment
	if a.Version != AssignmentVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, a.Version, AssignmentVersion)
	}
	if a.Node == "" {
		return fmt.Errorf("%w: %s.node: empty", ErrInvalid, key)
	}
	if _, err := ParseQoSClass(string(a.QoS)); err != nil || a.QoS == "" {
		return fmt.Errorf("%w: %s.qos: %q is not a QoS class", ErrInvalid, key, a.QoS)
	}
	if len(a.Containers) == 0 {
		return fmt.Errorf("%w: %s.containers: empty", ErrInvalid, key)
	}
	names := make(map[string]bool, len(a.Containers))
	seenMIG := map[string]bool{}
	for i, c := range a.Containers {
		field := fmt.Sprintf("%s.containers[%d]", key, i)
		if c.Name == "" {
			return fmt.Errorf("%w: %s.name: empty", ErrInvalid, field)
		}
		if names[c.Name] {
			return fmt.Errorf("%w: %s.name: %q appears twice", ErrInvalid, field, c.Name)
		}
		names[c.Name] = true
		if len(c.Cards) == 0 {
			return fmt.Errorf("%w: %s.cards: empty", ErrInvalid, field)
		}
		seen := make(map[string]bool, len(c.Cards))
		for j, card := range c.Cards {
			cf := fmt.Sprintf("%s.cards[%d]", field, j)
			if err := validateUUID(card.UUID); err != nil {
				return fmt.Errorf("%w: %s.uuid: %v", ErrInvalid, cf, err)
			}
			if seen[card.UUID] {
				return fmt.Errorf("%w: %s.uuid: %q given twice to one container", ErrInvalid, cf, card.UUID)
			}
			seen[card.UUID] = true
			if card.MemoryMiB <= 0 {
				return fmt.Errorf("%w: %s.memoryMiB: %d must be positive", ErrInvalid, cf, card.MemoryMiB)
			}
			if card.Cores < 0 || card.Cores > 100 {
				return fmt.Errorf("%w: %s.cores: %d is outside 0..100", ErrInvalid, cf, card.Cores)
			}
			if card.MIG != "" {
				if err := validateMIGUUID(card.MIG); err != nil {
					return fmt.Errorf("%w: %s.mig: %v", ErrInvalid, cf, err)
				}
				if card.Cores != 100 {
					return fmt.Errorf("%w: %s.cores: %d, but a MIG instance is given whole (100)", ErrInvalid, cf, card.Cores)
				}
				if seenMIG[card.MIG] {
					return fmt.Errorf("%w: %s.mig: %q given twice in one pod", ErrInvalid, cf, card.MIG)
				}
				seenMIG[card.MIG] = true
			}
		}
	}
	return nil
}

// validateMIGUUID checks a MIG device UUID as NVML reports it on current drivers:
// "MIG-" followed by a UUID. The older "MIG-GPU-<uuid>/<gi>/<ci>" form is refused by
// validateUUID's character rules.
func validateMIGUUID(u string) error {
	if err := validateUUID(u); err != nil {
		return err
	}
	if !strings.HasPrefix(u, "MIG-") || len(u) == len("MIG-") {
		return fmt.Errorf("%q is not a MIG device UUID (MIG-...)", u)
	}
	return nil
}
