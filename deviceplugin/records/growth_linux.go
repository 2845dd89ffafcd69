package records

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

// GrowthWatcher cuts a region back the moment its container grows it. The container has
// its region mounted read-write: ftruncate, write past the end and fallocate all make
// the file larger on the state directory's filesystem, and without a tmpfs per container
// directory (which needs a privileged agent) nothing else bounds it. The kernel reports
// each of those to an inotify watch (IN_MODIFY); the watcher then truncates the file to
// a region's size, which frees what the container wrote past it. What a container holds
// beyond its region at any moment is therefore what it writes between two of its own
// system calls and the watcher's answer, not what it writes in a GC period. Updates
// through the container's mapping of the region (the library's own writes) raise no
// inotify event and cost nothing.
//
// Each watched region is held open, and the watch is set through that descriptor, so the
// watcher always trims the inode the container has, whatever is renamed over its path.
type GrowthWatcher struct {
	// inotify wraps ifd for Run's reads (the runtime's poller, so that Close wakes them);
	// watches are added and removed on ifd itself, under mu, until closed.
	inotify *os.File
	ifd     int
	closed  bool
	size    int64
	onTrim  func(path string, bytes int64)

	mu      sync.Mutex
	byWD    map[int32]*watched
	byPath  map[string]*watched
	logged  map[string]time.Time
	trimmed map[string]int64
}

type watched struct {
	path string
	file *os.File
	wd   int32
	dev  uint64
	ino  uint64
}

// growthLogEvery bounds the log lines per region: a container that grows its region in a
// loop is logged once, then once per period with the count.
const growthLogEvery = time.Minute

// NewGrowthWatcher opens an inotify instance. onTrim, if set, is called after every trim
// (a metric).
func NewGrowthWatcher(onTrim func(path string, bytes int64)) (*GrowthWatcher, error) {
	size, err := usage.RegionFileSize()
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return &GrowthWatcher{inotify: os.NewFile(uintptr(fd), "inotify"), ifd: fd, size: size, onTrim: onTrim,
		byWD: map[int32]*watched{}, byPath: map[string]*watched{}, logged: map[string]time.Time{}, trimmed: map[string]int64{}}, nil
}

// Watch starts watching the region at path (idempotent while it is the same file) and
// trims it at once. A path that names another file than before is watched anew.
func (w *GrowthWatcher) Watch(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("watch region %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		if err == nil {
			err = errors.New("not a regular file")
		}
		return fmt.Errorf("watch region %s: %w", path, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		f.Close()
		return fmt.Errorf("watch region %s: the watcher has stopped", path)
	}
	if old, ok := w.byPath[path]; ok {
		if old.dev == st.Dev && old.ino == st.Ino {
			f.Close()
			w.trimLocked(old)
			return nil
		}
		w.dropLocked(old)
	}
	// The watch follows /proc/self/fd/N to the very inode we hold, not the path.
	wd, err := unix.InotifyAddWatch(w.ifd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())),
		unix.IN_MODIFY|unix.IN_DELETE_SELF)
	if err != nil {
		f.Close()
		return fmt.Errorf("watch region %s: inotify_add_watch: %w", path, err)
	}
	if other, ok := w.byWD[int32(wd)]; ok {
		// The same inode under a second path (a hard link): one watch, the latest path.
		w.dropLocked(other)
	}
	e := &watched{path: path, file: f, wd: int32(wd), dev: st.Dev, ino: st.Ino}
	w.byWD[e.wd], w.byPath[path] = e, e
	w.trimLocked(e)
	return nil
}

// Forget stops watching every region at or below dir (a pod's directory GC removes).
func (w *GrowthWatcher) Forget(dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, e := range w.byPath {
		if p == dir || isBelow(p, dir) {
			w.dropLocked(e)
		}
	}
}

// Sync makes the watched set exactly paths: new regions are watched, regions no longer
// listed are forgotten. GC calls it every pass, so that a watch lost for any reason comes
// back within a pass.
func (w *GrowthWatcher) Sync(paths []string) {
	keep := make(map[string]bool, len(paths))
	for _, p := range paths {
		keep[p] = true
		if err := w.Watch(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			klog.V(2).InfoS("Cannot watch a container's region for growth", "path", p, "err", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, e := range w.byPath {
		if !keep[p] {
			w.dropLocked(e)
		}
	}
}

// Watched returns how many regions are watched.
func (w *GrowthWatcher) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byPath)
}

// Run reads inotify events until ctx ends, then releases everything.
func (w *GrowthWatcher) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		w.inotify.Close() // wakes the Read below
	}()
	defer close(done)
	defer w.release()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.inotify.Read(buf)
		if err != nil {
			if ctx.Err() == nil {
				klog.ErrorS(err, "Region growth watcher stopped: regions are cut back by GC passes only")
			}
			return
		}
		w.handle(buf[:n])
	}
}

func (w *GrowthWatcher) handle(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := binary.NativeEndian.Uint32(b[12:16])
		next := unix.SizeofInotifyEvent + int(nameLen)
		if next > len(b) {
			next = len(b)
		}
		b = b[next:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			// Events were lost: look at every region.
			for _, e := range w.byPath {
				w.trimLocked(e)
			}
		case mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED) != 0:
			if e, ok := w.byWD[wd]; ok {
				w.dropLocked(e)
			}
		case mask&unix.IN_MODIFY != 0:
			if e, ok := w.byWD[wd]; ok {
				w.trimLocked(e)
			}
		}
	}
}

// trimLocked cuts e's file back to a region's size if it is larger.
func (w *GrowthWatcher) trimLocked(e *watched) {
	var st unix.Stat_t
	if err := unix.Fstat(int(e.file.Fd()), &st); err != nil || st.Size <= w.size {
		return
	}
	if err := unix.Ftruncate(int(e.file.Fd()), w.size); err != nil {
		klog.V(2).InfoS("Cannot cut a grown region back", "path", e.path, "err", err)
		return
	}
	grown := st.Size - w.size
	w.trimmed[e.path]++
	if w.onTrim != nil {
		w.onTrim(e.path, grown)
	}
	if last, ok := w.logged[e.path]; !ok || time.Since(last) >= growthLogEvery {
		klog.InfoS("A container grew its region; cut it back to a region's size", "path", e.path, "bytes", st.Size,
			"timesCutBack", w.trimmed[e.path])
		w.logged[e.path] = time.Now()
	}
}

func (w *GrowthWatcher) dropLocked(e *watched) {
	if !w.closed {
		_, _ = unix.InotifyRmWatch(w.ifd, uint32(e.wd))
	}
	e.file.Close()
	if w.byWD[e.wd] == e {
		delete(w.byWD, e.wd)
	}
	if w.byPath[e.path] == e {
		delete(w.byPath, e.path)
		delete(w.logged, e.path)
		delete(w.trimmed, e.path)
	}
}

func (w *GrowthWatcher) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.byPath {
		e.file.Close()
	}
	w.byWD, w.byPath = map[int32]*watched{}, map[string]*watched{}
}

func isBelow(path, dir string) bool {
	return strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
