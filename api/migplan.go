package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// MIGPlanVersion is the version of MIGPlan and MIGPlanStatus this build writes and
// reads.
const MIGPlanVersion = "v1"

// Bounds of the plan documents.
const (
	maxMIGPlanIDBytes      = 64
	maxMIGPlanProfiles     = 64
	MaxMIGPlanMessageBytes = 1024
)

// MIGPlan asks a node agent to change the MIG layout of one idle card so that it holds
// exactly Profiles (AnnotationMIGPlan, written by the scheduler). The agent chooses
// the placements with the card's own profile table, keeping as many instances where
// they are as it can.
type MIGPlan struct {
	Version string `json:"version"`
	// ID names this plan; the agent's status repeats it.
	ID string `json:"id"`
	// Card is the UUID of the card to change.
	Card string `json:"card"`
	// Profiles is the wanted layout as a multiset of profile names (a name listed
	// twice is two instances), e.g. ["3g.40gb", "2g.20gb", "1g.10gb"].
	Profiles []string `json:"profiles"`
	// Created is when the scheduler wrote the plan (RFC 3339, UTC).
	Created string `json:"created"`
}

// Outcomes of a plan, written by the agent in MIGPlanStatus. Every outcome is final:
// the agent writes a status only when it is done with the plan.
const (
	// MIGPlanApplied: the card now holds the plan's profiles and the new layout is
	// published in AnnotationMIGInstances.
	MIGPlanApplied = "applied"
	// MIGPlanRefusedBusy: a process ran on the card; nothing was changed.
	MIGPlanRefusedBusy = "refused-busy"
	// MIGPlanRefusedInvalid: the plan names a card the agent does not have, one not in
	// MIG mode, or a layout the card cannot hold; nothing was changed.
	MIGPlanRefusedInvalid = "refused-invalid"
	// MIGPlanFailedRolledBack: a step failed and the previous layout was restored
	// (instances recreated on the way get new MIG UUIDs).
	MIGPlanFailedRolledBack = "failed-rolled-back"
	// MIGPlanFailedRollbackFailed: a step failed and the previous layout could not be
	// restored; the card holds what NVML now reports, published as usual.
	MIGPlanFailedRollbackFailed = "failed-rollback-failed"
)

var migPlanOutcomes = map[string]bool{MIGPlanApplied: true, MIGPlanRefusedBusy: true, MIGPlanRefusedInvalid: true,
	MIGPlanFailedRolledBack: true, MIGPlanFailedRollbackFailed: true}

// MIGPlanStatus is the agent's answer to a plan (AnnotationMIGPlanStatus).
type MIGPlanStatus struct {
	Version string `json:"version"`
	// ID is the plan's ID.
	ID      string `json:"id"`
	Card    string `json:"card"`
	Outcome string `json:"outcome"`
	// Message says what happened, for people (at most MaxMIGPlanMessageBytes).
	Message string `json:"message,omitempty"`
	// Time is when the agent finished (RFC 3339, UTC).
	Time string `json:"time"`
}

// Final reports whether the card may be planned for again: every outcome is.
func (s *MIGPlanStatus) Final() bool { return migPlanOutcomes[s.Outcome] }

// CreatedAt is the plan's creation time; Validate has checked that it parses.
func (p *MIGPlan) CreatedAt() time.Time {
	t, _ := time.Parse(time.RFC3339, p.Created)
	return t
}

// At is when the agent finished; Validate has checked that it parses.
func (s *MIGPlanStatus) At() time.Time {
	t, _ := time.Parse(time.RFC3339, s.Time)
	return t
}

// EncodeMIGPlan validates and serialises a plan.
func EncodeMIGPlan(p *MIGPlan) (string, error) {
	if p.Version == "" {
		p.Version = MIGPlanVersion
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode MIG plan: %w", err)
	}
	return string(b), nil
}

// DecodeMIGPlan parses and validates the AnnotationMIGPlan value.
func DecodeMIGPlan(s string) (*MIGPlan, error) {
	key := AnnotationMIGPlan
	if err := checkVersion(s, key, MIGPlanVersion); err != nil {
		return nil, err
	}
	var p MIGPlan
	if err := decodeStrict(s, &p); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate reports the first problem in a plan, naming the field and quoting the value.
func (p *MIGPlan) Validate() error {
	key := AnnotationMIGPlan
	if p.Version != MIGPlanVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, p.Version, MIGPlanVersion)
	}
	if err := validatePlanID(p.ID); err != nil {
		return fmt.Errorf("%w: %s: id: %v", ErrInvalid, key, err)
	}
	if err := validateUUID(p.Card); err != nil {
		return fmt.Errorf("%w: %s: card: %v", ErrInvalid, key, err)
	}
	if len(p.Profiles) == 0 || len(p.Profiles) > maxMIGPlanProfiles {
		return fmt.Errorf("%w: %s: profiles: %d entries (want 1..%d)", ErrInvalid, key, len(p.Profiles), maxMIGPlanProfiles)
	}
	for i, name := range p.Profiles {
		if err := ValidateMIGProfileName(name); err != nil {
			return fmt.Errorf("%w: %s: profiles[%d]: %v", ErrInvalid, key, i, err)
		}
	}
	if err := validateRFC3339(p.Created); err != nil {
		return fmt.Errorf("%w: %s: created: %v", ErrInvalid, key, err)
	}
	return nil
}

// EncodeMIGPlanStatus validates and serialises a plan's status.
func EncodeMIGPlanStatus(s *MIGPlanStatus) (string, error) {
	if s.Version == "" {
		s.Version = MIGPlanVersion
	}
	if err := s.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode MIG plan status: %w", err)
	}
	return string(b), nil
}

// DecodeMIGPlanStatus parses and validates the AnnotationMIGPlanStatus value.
func DecodeMIGPlanStatus(s string) (*MIGPlanStatus, error) {
	key := AnnotationMIGPlanStatus
	if err := checkVersion(s, key, MIGPlanVersion); err != nil {
		return nil, err
	}
	var st MIGPlanStatus
	if err := decodeStrict(s, &st); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return &st, nil
}

// Validate reports the first problem in a status, naming the field and quoting the value.
func (s *MIGPlanStatus) Validate() error {
	key := AnnotationMIGPlanStatus
	if s.Version != MIGPlanVersion {
		return fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, key, s.Version, MIGPlanVersion)
	}
	if err := validatePlanID(s.ID); err != nil {
		return fmt.Errorf("%w: %s: id: %v", ErrInvalid, key, err)
	}
	if err := validateUUID(s.Card); err != nil {
		return fmt.Errorf("%w: %s: card: %v", ErrInvalid, key, err)
	}
	if !migPlanOutcomes[s.Outcome] {
		return fmt.Errorf("%w: %s: outcome: %q is not one of applied, refused-busy, refused-invalid, failed-rolled-back, failed-rollback-failed",
			ErrInvalid, key, s.Outcome)
	}
	if len(s.Message) > MaxMIGPlanMessageBytes {
		return fmt.Errorf("%w: %s: message: %d bytes (at most %d)", ErrInvalid, key, len(s.Message), MaxMIGPlanMessageBytes)
	}
	if err := validateRFC3339(s.Time); err != nil {
		return fmt.Errorf("%w: %s: time: %v", ErrInvalid, key, err)
	}
	return nil
}

// validatePlanID accepts 1 to 64 letters, digits, '-' and '.'.
func validatePlanID(id string) error {
	if id == "" || len(id) > maxMIGPlanIDBytes {
		return fmt.Errorf("%q is not 1 to %d bytes long", id, maxMIGPlanIDBytes)
	}
	for _, r := range id {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("%q contains %q", id, r)
		}
	}
	return nil
}

// validateRFC3339 accepts a time written exactly as time.RFC3339 writes it in UTC, so
// that a decoded document re-encodes to itself.
func validateRFC3339(v string) error {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.UTC().Format(time.RFC3339) != v {
		return fmt.Errorf("%q is not a UTC time like 2026-01-02T15:04:05Z", v)
	}
	return nil
}
