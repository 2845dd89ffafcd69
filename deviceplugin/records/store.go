// Package records keeps the node agent's per-container state on the host: the
// directory each vGPU container mounts (shared region, limits file) and, beside it,
// the agent's record of what Allocate decided, which survives an agent restart.
package records

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/api"
)

// LimitsFileName is the limits file inside the container directory.
const LimitsFileName = "limits.env"

// RegionFileName is the shared accounting region inside the container directory.
const RegionFileName = "region"

// ErrBadName is wrapped when a pod UID or container name cannot be used as a path element.
var ErrBadName = errors.New("unsafe path element")

// recordVersion is the version of the agent-private allocation record.
const recordVersion = "v1"

// Record is what Allocate decided for one container. It lives beside (not inside) the
// container's shared directory, so the container cannot rewrite it, and it survives an
// agent restart: PreStartContainer checks the kubelet's answer against it.
type Record struct {
	Version   string               `json:"version"`
	Namespace string               `json:"namespace"`
	Pod       string               `json:"pod"`
	UID       string               `json:"uid"`
	Container string               `json:"container"`
	SlotIDs   []string             `json:"slotIDs"`
	Cards     []api.CardAssignment `json:"cards"`
	QoS       api.QoSClass         `json:"qos"`
	Allocated time.Time            `json:"allocated"`
	Started   *time.Time           `json:"started,omitempty"`
}

// Store owns the per-container directories under Root:
//
//	<Root>/pods/<pod UID>/<container>/            mounted into the container (shared region, limits.env)
//	<Root>/pods/<pod UID>/<container>.alloc.json  the agent's Record
//
// A directory is created once and removed only by GC, for pods that are gone.
type Store struct {
	Root string
}

// ContainerDir is the host directory mounted into the container.
func (s *Store) ContainerDir(uid, container string) string {
	return filepath.Join(s.Root, "pods", uid, container)
}

func (s *Store) recordPath(uid, container string) string {
	return filepath.Join(s.Root, "pods", uid, container+".alloc.json")
}

func checkName(kind, v string) error {
	if v == "" || v == "." || v == ".." || strings.ContainsAny(v, "/\\\x00") {
		return fmt.Errorf("%w: %s %q", ErrBadName, kind, v)
	}
	return nil
}

// Prepare creates the container's directory (keeping whatever is in it) and writes its
// record and limits file.
func (s *Store) Prepare(rec *Record, limits string) error {
	if err := checkName("pod UID", rec.UID); err != nil {
		return err
	}
	if err := checkName("container", rec.Container); err != nil {
		return err
	}
	rec.Version = recordVersion
	sort.Strings(rec.SlotIDs)
	dir := s.ContainerDir(rec.UID, rec.Container)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create container directory: %w", err)
	}
	if err := s.WriteLimits(rec.UID, rec.Container, limits); err != nil {
		return err
	}
	return s.writeRecord(rec)
}

func (s *Store) writeRecord(rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode allocation record: %w", err)
	}
	return writeAtomic(s.recordPath(rec.UID, rec.Container), b, 0o600)
}

// ReadRecord returns the container's record; os.ErrNotExist (wrapped) when Allocate
// never prepared it.
func (s *Store) ReadRecord(uid, container string) (*Record, error) {
	if err := checkName("pod UID", uid); err != nil {
		return nil, err
	}
	if err := checkName("container", container); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.recordPath(uid, container))
	if err != nil {
		return nil, fmt.Errorf("read allocation record: %w", err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("decode allocation record %s: %w", s.recordPath(uid, container), err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("allocation record %s: version %q, want %q", s.recordPath(uid, container), rec.Version, recordVersion)
	}
	return &rec, nil
}

// MarkStarted records that PreStartContainer handed the container its limits.
func (s *Store) MarkStarted(rec *Record, now time.Time) error {
	rec.Started = &now
	return s.writeRecord(rec)
}

// WriteLimits replaces the container's limits file in one rename, so vgpu-core never
// reads half a file.
func (s *Store) WriteLimits(uid, container, limits string) error {
	return writeAtomic(filepath.Join(s.ContainerDir(uid, container), LimitsFileName), []byte(limits), 0o644)
}

// Records lists every record on disk, keyed by pod UID.
func (s *Store) Records() (map[string][]*Record, error) {
	pods, err := os.ReadDir(filepath.Join(s.Root, "pods"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pod directories: %w", err)
	}
	out := make(map[string][]*Record, len(pods))
	for _, p := range pods {
		files, err := filepath.Glob(filepath.Join(s.Root, "pods", p.Name(), "*.alloc.json"))
		if err != nil {
			return nil, fmt.Errorf("list records of pod %s: %w", p.Name(), err)
		}
		out[p.Name()] = nil
		for _, f := range files {
			rec, err := s.ReadRecord(p.Name(), strings.TrimSuffix(filepath.Base(f), ".alloc.json"))
			if err != nil {
				return nil, err
			}
			out[p.Name()] = append(out[p.Name()], rec)
		}
	}
	return out, nil
}

// RemovePod deletes everything of one pod. Only GC calls it, for pods that are gone.
func (s *Store) RemovePod(uid string) error {
	if err := checkName("pod UID", uid); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(s.Root, "pods", uid)); err != nil {
		return fmt.Errorf("remove directories of pod %s: %w", uid, err)
	}
	return nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
