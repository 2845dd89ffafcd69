package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"tags.cncf.io/container-device-interface/pkg/parser"
)

// CheckpointVersion is the version of the checkpoint this build writes and reads.
const CheckpointVersion = "v1"

// ErrCheckpoint is wrapped by every error about a checkpoint's contents.
var ErrCheckpoint = errors.New("invalid DRA checkpoint")

// Bounds of a checkpoint: a node runs far fewer claims than this, and the file is read
// whole at start.
const (
	maxCheckpointBytes  = 16 << 20
	maxCheckpointClaims = 16384
	maxClaimDevices     = 32 // resource.k8s.io's limit on allocation results per claim
	maxCDIDeviceIDs     = 8
)

// Checkpoint is the record of the claims this driver prepared, by claim UID. It is what
// makes a second NodePrepareResources for a claim return the same devices, and what the
// driver reloads after a restart.
type Checkpoint struct {
	Version string                   `json:"version"`
	Claims  map[string]PreparedClaim `json:"claims"`
}

// PreparedClaim is one prepared claim: its shares, the CDI devices returned for them and
// where its containers keep their regions.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
	// Region is RegionShm or RegionVolume (region.go); absent (RegionLegacy) in the
	// entries of agents that kept every claim's region at one path per pod.
	Region string `json:"region,omitempty"`
}

// PreparedDevice is one share and the CDI device IDs the kubelet got for it.
type PreparedDevice struct {
	Share
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// EncodeCheckpoint validates and serialises a checkpoint.
func EncodeCheckpoint(c *Checkpoint) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode DRA checkpoint: %w", err)
	}
	return append(b, '\n'), nil
}

// DecodeCheckpoint parses and validates a checkpoint. Unknown fields, a second JSON
// value and versions other than CheckpointVersion are refused.
func DecodeCheckpoint(b []byte) (*Checkpoint, error) {
	if len(b) > maxCheckpointBytes {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrCheckpoint, len(b), maxCheckpointBytes)
	}
	var probe struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var v string
	if err := json.Unmarshal(probe.Version, &v); err != nil || v != CheckpointVersion {
		return nil, fmt.Errorf("%w: version %s (this build reads %q)", ErrCheckpoint, quoteRaw(probe.Version), CheckpointVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Checkpoint
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the checkpoint object", ErrCheckpoint)
	}
	if c.Claims == nil {
		c.Claims = map[string]PreparedClaim{}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate reports the first problem of a checkpoint, naming the field, in claim UID
// order so that the same problem is reported every time.
func (c *Checkpoint) Validate() error {
	if c.Version != CheckpointVersion {
		return fmt.Errorf("%w: version %q (this build writes %q)", ErrCheckpoint, c.Version, CheckpointVersion)
	}
	if len(c.Claims) > maxCheckpointClaims {
		return fmt.Errorf("%w: claims: %d entries (at most %d)", ErrCheckpoint, len(c.Claims), maxCheckpointClaims)
	}
	for _, uid := range slices.Sorted(maps.Keys(c.Claims)) {
		if err := validateUID(uid); err != nil {
			return fmt.Errorf("%w: claims: %v", ErrCheckpoint, err)
		}
		if err := c.Claims[uid].validate(); err != nil {
			return fmt.Errorf("%w: claims[%q].%v", ErrCheckpoint, uid, err)
		}
	}
	return nil
}

func (p PreparedClaim) validate() error {
	switch {
	case p.Namespace == "":
		return errors.New("namespace: missing")
	case p.Name == "":
		return errors.New("name: missing")
	case len(p.Devices) > maxClaimDevices:
		return fmt.Errorf("devices: %d entries (at most %d)", len(p.Devices), maxClaimDevices)
	case !validRegion(p.Region):
		return fmt.Errorf("region: %q (want %q, %q or none)", clipText(p.Region), RegionShm, RegionVolume)
	}
	seen := map[string]bool{}
	for i, d := range p.Devices {
		idx, ok := parseDeviceName(d.Device)
		switch {
		case !ok:
			return fmt.Errorf("devices[%d].device: %q is not a device name this driver writes", i, d.Device)
		case seen[d.Device]:
			return fmt.Errorf("devices[%d].device: %q twice", i, d.Device)
		case idx != d.Index:
			return fmt.Errorf("devices[%d].index: %d, but the device is %q", i, d.Index, d.Device)
		case d.Request == "":
			return fmt.Errorf("devices[%d].request: missing", i)
		case d.Pool == "":
			return fmt.Errorf("devices[%d].pool: missing", i)
		case d.UUID == "":
			return fmt.Errorf("devices[%d].uuid: missing", i)
		case d.MemoryMiB < 1:
			return fmt.Errorf("devices[%d].memoryMiB: %d (at least 1)", i, d.MemoryMiB)
		case d.Cores < 0 || d.Cores > MaxCores:
			return fmt.Errorf("devices[%d].cores: %d (want 0..%d)", i, d.Cores, MaxCores)
		case len(d.CDIDeviceIDs) == 0 || len(d.CDIDeviceIDs) > maxCDIDeviceIDs:
			return fmt.Errorf("devices[%d].cdiDeviceIDs: %d entries (want 1..%d)", i, len(d.CDIDeviceIDs), maxCDIDeviceIDs)
		}
		seen[d.Device] = true
		for j, id := range d.CDIDeviceIDs {
			if _, _, _, err := parser.ParseQualifiedName(id); err != nil {
				return fmt.Errorf("devices[%d].cdiDeviceIDs[%d]: %v", i, j, err)
			}
		}
	}
	return nil
}

// validateUID accepts what the API server writes as a UID (a UUID) and, to keep the
// path and CDI names derived from it safe, nothing outside [A-Za-z0-9-] or longer than
// 64 bytes.
func validateUID(uid string) error {
	if uid == "" || len(uid) > 64 {
		return fmt.Errorf("uid %q: want 1..64 characters", clipText(uid))
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("uid %q: character %q is not a letter, digit or '-'", clipText(uid), c)
		}
	}
	if uid[0] == '-' {
		return fmt.Errorf("uid %q: starts with '-'", uid)
	}
	return nil
}

// readCheckpoint loads the checkpoint at path; a missing file is an empty checkpoint.
func readCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Checkpoint{Version: CheckpointVersion, Claims: map[string]PreparedClaim{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read DRA checkpoint: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read DRA checkpoint %s: %w", path, err)
	}
	c, err := DecodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// writeCheckpoint replaces the checkpoint at path in one rename, after the new file's
// bytes are on disk: a crash leaves the old checkpoint or the new one, never a part.
func writeCheckpoint(path string, c *Checkpoint) error {
	b, err := EncodeCheckpoint(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write DRA checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write DRA checkpoint %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // makes the rename itself durable where the filesystem allows
		d.Close()
	}
	return nil
}

// quoteRaw is a JSON value as written, cut short for an error message.
func quoteRaw(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	return clipText(string(raw))
}

func clipText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
