// Package records keeps the node agent's per-container state on the host: the
// container's directory, which holds the two files the container gets (its limits file
// and vgpu-core's shared region) and, beside it, the agent's record of what Allocate
// decided, which survives an agent restart.
package records

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

// LimitsFileName is the limits file inside the container directory.
const LimitsFileName = "limits.env"

// RegionFileName is the shared accounting region inside the container directory.
const RegionFileName = "region"

// File modes of what the container gets. The limits file is the agent's word: nobody in
// the container may change it (it is also mounted read-only). The region is written by
// every process of the container, whatever its user: non-root images use it too.
const (
	LimitsFileMode os.FileMode = 0o444
	RegionFileMode os.FileMode = 0o666
	// containerDirMode keeps host users other than root out of the container directory:
	// what a container writes into its region must not be reachable from the host.
	containerDirMode os.FileMode = 0o700
)

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
	Allocated time.Time            `json:"allocated"`
	Started   *time.Time           `json:"started,omitempty"`
}

// Store owns the per-container directories under Root:
//
//	<Root>/pods/<pod UID>/<container>/            agent-private (0700), never mounted whole:
//	    limits.env                                0444, mounted read-only into the container
//	    region                                    0666, exactly usage.RegionFileSize bytes, mounted read-write
//	<Root>/pods/<pod UID>/<container>.alloc.json  the agent's Record
//
// The container gets the two files as single-file mounts, so it cannot create, rename or
// replace anything in the directory; it can still resize its region, which TmpfsBytes
// bounds. A directory is created once and removed only by GC, for pods that are gone.
type Store struct {
	Root string
	// TmpfsBytes, when positive, puts each container directory on a tmpfs of that many
	// bytes the store mounts itself (nosuid, nodev, noexec), so that a container that
	// grows its region fills its own tmpfs and nothing else. It is skipped, with one log
	// line saying why, where the agent lacks CAP_SYS_ADMIN or its mounts would not reach
	// the container runtime (TmpfsState).
	TmpfsBytes int64
	// Growth, when set, cuts each region back as soon as its container grows it
	// (GrowthWatcher); without it, and without a tmpfs, GC passes do it.
	Growth *GrowthWatcher

	tmpfsOnce sync.Once
	tmpfsOn   bool
	tmpfsWhy  string
	// mountsReachRuntime says whether a mount the agent makes under Root is what the
	// container runtime sees there (tests replace it).
	mountsReachRuntime func(root string) (bool, string)
}

// ContainerDir is the container's host directory; the container gets two files of it.
func (s *Store) ContainerDir(uid, container string) string {
	return filepath.Join(s.Root, "pods", uid, container)
}

// TmpfsState says whether container directories get their own tmpfs and, when they do
// not, why. The decision is taken (and logged) once.
func (s *Store) TmpfsState() (on bool, why string) {
	s.tmpfsOnce.Do(func() {
		s.tmpfsOn, s.tmpfsWhy = s.decideTmpfs()
		if s.tmpfsOn {
			klog.InfoS("Each container directory gets its own tmpfs: a container that grows its region fills only that",
				"size", s.TmpfsBytes, "stateDir", s.Root)
		} else if s.TmpfsBytes > 0 {
			klog.InfoS("Not mounting a tmpfs on container directories: a container can grow its region on the state directory's filesystem",
				"reason", s.tmpfsWhy, "stateDir", s.Root)
		}
	})
	return s.tmpfsOn, s.tmpfsWhy
}

func (s *Store) decideTmpfs() (bool, string) {
	if s.TmpfsBytes <= 0 {
		return false, "disabled (size 0)"
	}
	if min := MinTmpfsBytes(); s.TmpfsBytes < min {
		return false, fmt.Sprintf("a tmpfs of %d bytes cannot hold a region and a limits file (%d at least)", s.TmpfsBytes, min)
	}
	if ok, why := canMount(); !ok {
		return false, why
	}
	reach := s.mountsReachRuntime
	if reach == nil {
		reach = mountsReachRuntime
	}
	return reach(s.Root)
}

// MinTmpfsBytes is the smallest tmpfs that holds a container's files: the region, the
// limits file and the limits file's replacement while it is renamed over it.
func MinTmpfsBytes() int64 {
	size, err := usage.RegionFileSize()
	if err != nil {
		size = 0
	}
	page := int64(os.Getpagesize())
	return (size+page-1)/page*page + 2*page
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

// WriteLimits makes the container's directory what the container's two mounts need (see
// Store): it replaces the limits file in one rename (0444, so vgpu-core never reads half a
// file and nobody in the container can change it) and keeps the region if it is still the
// file the agent created (a regular file of the region's size, mode 0666, the agent's),
// or else replaces it with a fresh one. PreStartContainer calls it before every start of
// the container, when none of its processes runs, so a container that resized or chmod'ed
// its region, or a node that lost the directory's tmpfs at a reboot, starts again with
// both files as Allocate made them.
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
	region := filepath.Join(dir, RegionFileName)
	if err := ensureRegion(region); err != nil {
		return err
	}
	if s.Growth != nil {
		if err := s.Growth.Watch(region); err != nil {
			klog.ErrorS(err, "Cannot watch the container's region for growth; GC passes will cut it back", "path", region)
		}
	}
	return writeAtomic(filepath.Join(dir, LimitsFileName), []byte(limits), LimitsFileMode)
}

// containerDir creates the container's directory (0700; its pod's directory 0755, which
// holds the records) and, with TmpfsBytes, mounts its tmpfs on it.
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
	if on, _ := s.TmpfsState(); on {
		// A failed mount leaves the files on the state directory's filesystem, where the
		// runtime sees them too: the container starts, unbounded; the next start tries again.
		if err := mountTmpfs(dir, s.TmpfsBytes); err != nil {
			klog.ErrorS(err, "Cannot mount the container directory's tmpfs; its files go on the state directory's filesystem", "dir", dir)
		} else if st, err = os.Lstat(dir); err != nil {
			return "", fmt.Errorf("container directory: %w", err)
		}
	}
	if st.Mode().Perm() != containerDirMode {
		if err := os.Chmod(dir, containerDirMode); err != nil {
			return "", fmt.Errorf("container directory: %w", err)
		}
	}
	return dir, nil
}

// ensureRegion keeps the region at path if it is the file the agent made, or else puts a
// fresh zero region there in one rename. vgpu-core initialises a region whose magic is
// zero (vgpu-core/src/shared/region.c, region_map): a zero file of the right size is what
// it would create itself.
func ensureRegion(path string) error {
	size, err := usage.RegionFileSize()
	if err != nil {
		return err
	}
	st, err := os.Lstat(path)
	if err == nil && st.Mode().IsRegular() && st.Size() == size && st.Mode().Perm() == RegionFileMode &&
		st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) == 0 && ownedByMe(st) {
		return nil
	}
	if err == nil {
		klog.V(2).InfoS("Replacing a container's region that is not as the agent made it", "path", path,
			"mode", st.Mode().String(), "size", st.Size())
		if st.Mode().IsRegular() && st.Size() > size {
			// Give back what the container grew it by now, even while something still
			// holds the old file open.
			_, _ = trimRegion(path, 0)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("region %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+RegionFileName+"-*")
	if err != nil {
		return fmt.Errorf("create region %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	err = reserve(tmp, size)
	if err == nil {
		err = tmp.Chmod(RegionFileMode) // CreateTemp's mode is 0600, and umask would narrow 0666
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = replace(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("create region %s: %w", path, err)
	}
	return nil
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

// TrimRegions cuts each region of recs that its container grew past a region's size back
// to that size, giving back what the container wrote past it (the region's own bytes, the
// first RegionFileSize, are kept: the container's processes go on). It returns the regions
// it trimmed, and makes Growth watch exactly these regions. With Growth a region is cut
// back as it grows and this pass only catches what the watcher could not see; without
// Growth or a tmpfs per container directory (TmpfsBytes) this is what bounds the space a
// container holds on the state directory's filesystem, once per GC pass.
func (s *Store) TrimRegions(recs map[string][]*Record) []string {
	size, err := usage.RegionFileSize()
	if err != nil {
		return nil
	}
	var trimmed, all []string
	defer func() {
		if s.Growth != nil {
			s.Growth.Sync(all)
		}
	}()
	for _, rs := range recs {
		for _, r := range rs {
			if checkName("pod UID", r.UID) != nil || checkName("container", r.Container) != nil {
				continue
			}
			path := filepath.Join(s.ContainerDir(r.UID, r.Container), RegionFileName)
			all = append(all, path)
			grown, err := trimRegion(path, size)
			if err != nil {
				klog.V(2).InfoS("Cannot check a container's region size", "path", path, "err", err)
				continue
			}
			if grown > 0 {
				klog.InfoS("A container grew its region; cut it back to a region's size", "pod", klog.KRef(r.Namespace, r.Pod),
					"container", r.Container, "bytes", grown+size)
				trimmed = append(trimmed, path)
			}
		}
	}
	return trimmed
}

// trimRegion truncates the regular file at path to size if it is larger, and returns by
// how much it was. It neither follows a link nor waits on a FIFO.
func trimRegion(path string, size int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() <= size {
		return 0, err
	}
	return st.Size() - size, f.Truncate(size)
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

// RemovePod deletes everything of one pod, unmounting the tmpfs of its container
// directories first. Only GC calls it, for pods that are gone.
func (s *Store) RemovePod(uid string) error {
	if err := checkName("pod UID", uid); err != nil {
		return err
	}
	dir := filepath.Join(s.Root, "pods", uid)
	if s.Growth != nil {
		s.Growth.Forget(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove directories of pod %s: %w", uid, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := unmountTmpfs(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove directories of pod %s: %w", uid, err)
			}
		}
	}
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
