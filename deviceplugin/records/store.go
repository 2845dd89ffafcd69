// Package records keeps the node agent's per-container state on the host: the
// container's directory, which holds the one file the container gets (its limits file,
// mounted read-only) and, beside it, the agent's record of what Allocate decided, which
// survives an agent restart. vgpu-core's shared region is not here: it lives in the
// container's own pod (api.RegionVolumeName), where growing it fills only the pod's memory.
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

// LimitsFileMode is the limits file's: the agent's word, which nobody in the container
// may change (it is also mounted read-only).
const LimitsFileMode os.FileMode = 0o444

// containerDirMode keeps host users other than root out of the container directory.
const containerDirMode os.FileMode = 0o700

// ErrBadName is wrapped when a pod UID or container name cannot be used as a path element.
var ErrBadName = errors.New("unsafe path element")

// recordVersion is the version of the agent-private allocation record.
const recordVersion = "v1"

// Record is what Allocate decided for one container. It lives beside (not inside) the
// container's directory, and it survives an agent restart: PreStartContainer checks the
// kubelet's answer against it.
type Record struct {
	Version   string               `json:"version"`
	Namespace string               `json:"namespace"`
	Pod       string               `json:"pod"`
	UID       string               `json:"uid"`
	Container string               `json:"container"`
	SlotIDs   []string             `json:"slotIDs"`
	Cards     []api.CardAssignment `json:"cards"`
	QoS       api.QoSClass         `json:"qos"`
	// RegionVolume says the container keeps its region on its pod's region volume, where
	// the agent reads it (api.CheckRegionVolume passed at Allocate); else in its /dev/shm.
	RegionVolume bool       `json:"regionVolume,omitempty"`
	Allocated    time.Time  `json:"allocated"`
	Started      *time.Time `json:"started,omitempty"`
}

// Store owns the per-container directories under Root:
//
//	<Root>/pods/<pod UID>/<container>/            agent-private (0700), never mounted whole:
//	    limits.env                                0444, mounted read-only into the container
//	<Root>/pods/<pod UID>/<container>.alloc.json  the agent's Record
//
// The container gets its limits file as a single-file, read-only mount: it can neither
// change nor grow anything here. A directory is created once and removed only by GC, for
// pods that are gone.
type Store struct {
	Root string
}

// ContainerDir is the container's host directory; the container gets two files of it.
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

// Prepare creates the container's directory and files (a fresh region, the limits file)
// and writes its record.
func (s *Store) Prepare(rec *Record, limits string) error {
	if err := checkName("pod UID", rec.UID); err != nil {
		return err
	}
	if err := checkName("container", rec.Container); err != nil {
		return err
	}
	rec.Version = recordVersion
	sort.Strings(rec.SlotIDs)
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

// WriteLimits replaces the container's limits file in one rename (0444, so vgpu-core
// never reads half a file and nobody in the container can change it). PreStartContainer
// calls it before every start of the container.
func (s *Store) WriteLimits(uid, container, limits string) error {
	if err := checkName("pod UID", uid); err != nil {
		return err
	}
	if err := checkName("container", container); err != nil {
		return err
	}
	dir, err := s.containerDir(uid, container)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, LimitsFileName), []byte(limits), LimitsFileMode)
}

// containerDir creates the container's directory (0700; its pod's directory 0755, which
// holds the records).
func (s *Store) containerDir(uid, container string) (string, error) {
	dir := s.ContainerDir(uid, container)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("create container directory: %w", err)
	}
	if err := os.Mkdir(dir, containerDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create container directory: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("container directory: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("container directory %s is a %v, not a directory", dir, st.Mode().Type())
	}
	if st.Mode().Perm() != containerDirMode {
		if err := os.Chmod(dir, containerDirMode); err != nil {
			return "", fmt.Errorf("container directory: %w", err)
		}
	}
	return dir, nil
}

// replace renames from over to; a directory in the way (left by a container that could
// once write the whole directory) is removed first.
func replace(from, to string) error {
	err := os.Rename(from, to)
	if err == nil {
		return nil
	}
	if st, lerr := os.Lstat(to); lerr != nil || !st.IsDir() {
		return err
	}
	if err := os.RemoveAll(to); err != nil {
		return err
	}
	return os.Rename(from, to)
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
	dir := filepath.Join(s.Root, "pods", uid)
	if err := os.RemoveAll(dir); err != nil {
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
	if err := replace(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
