package records

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchedStore is a Store whose regions a running GrowthWatcher guards, and the count of
// trims it reported.
func watchedStore(t *testing.T) (*Store, *atomic.Int64) {
	t.Helper()
	var trims atomic.Int64
	w, err := NewGrowthWatcher(func(string, int64) { trims.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &Store{Root: t.TempDir(), Growth: w}, &trims
}

// allocated is what the file holds on its filesystem (its blocks, not its size).
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGrowthWatcherCutsEveryKindOfGrowthBackAtOnce: the tenant's three ways to make its
// region larger (ftruncate, a write past the end, fallocate) are each undone within
// moments, not at the next GC pass, and the region's own bytes, which the container's
// processes share through their mappings, are kept.
func TestGrowthWatcherCutsEveryKindOfGrowthBackAtOnce(t *testing.T) {
	size := regionSize(t)
	s, trims := watchedStore(t)
	if err := s.Prepare(rec("u-1", "train"), "version=1\n"); err != nil {
		t.Fatal(err)
	}
	region := filepath.Join(s.ContainerDir("u-1", "train"), RegionFileName)
	f, err := os.OpenFile(region, os.O_RDWR, 0) // what the container's mount gives it
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("vgpu-core's"), 0); err != nil {
		t.Fatal(err)
	}
	grow := map[string]func() error{
		"ftruncate to 1 TiB": func() error { return f.Truncate(1 << 40) },
		"a 64 MiB write past the end": func() error {
			_, err := f.WriteAt(make([]byte, 64<<20), size+4096)
			return err
		},
		"fallocate of 256 MiB past the end": func() error {
			return syscall.Fallocate(int(f.Fd()), 0, size, 256<<20)
		},
	}
	for what, do := range grow {
		before := trims.Load()
		if err := do(); err != nil {
			if what[0] == 'f' && strings.HasPrefix(what, "fallocate") && err == syscall.EOPNOTSUPP {
				continue // the test directory's filesystem has no fallocate
			}
			t.Fatalf("%s: %v", what, err)
		}
		eventually(t, what+": the region is not back to its size", func() bool {
			st, err := f.Stat()
			return err == nil && st.Size() == size && trims.Load() > before
		})
		if got := allocated(t, region); got > size+(1<<20) {
			t.Errorf("%s: the file still holds %d bytes on disk after the cut, region %d", what, got, size)
		}
	}
	b := make([]byte, 11)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "vgpu-core's" {
		t.Fatalf("the region's own bytes: %q (%v), want them kept", b, err)
	}
}

// TestAHostileWriterHoldsLittleAtAnyMoment is the disk-filling attack: the container
// writes past its region as fast as it can, 8 MiB at a time, for a second. Without the
// watcher the file would hold everything written (GC cuts it back once a minute); with it,
// what the file holds at any sampled moment stays a small multiple of one write.
func TestAHostileWriterHoldsLittleAtAnyMoment(t *testing.T) {
	size := regionSize(t)
	s, _ := watchedStore(t)
	if err := s.Prepare(rec("u-2", "hog"), "version=1\n"); err != nil {
		t.Fatal(err)
	}
	region := filepath.Join(s.ContainerDir("u-2", "hog"), RegionFileName)
	f, err := os.OpenFile(region, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const chunk = 8 << 20
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i) | 1
	}
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		off := size
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := f.WriteAt(buf, off)
			if err != nil {
				return
			}
			written.Add(int64(n))
			off += int64(n)
		}
	}()
	var peak int64
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		peak = max(peak, allocated(t, region)-size)
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	if written.Load() < 16*chunk {
		t.Skipf("only %d MiB written in a second: too slow a machine to tell", written.Load()>>20)
	}
	const bound = 16 * chunk // 128 MiB
	t.Logf("written past the region: %d MiB in 1 s; largest sampled excess on disk: %d MiB", written.Load()>>20, peak>>20)
	if peak > bound {
		t.Errorf("the file held %d MiB past its region at one moment (of %d MiB written); want at most %d MiB",
			peak>>20, written.Load()>>20, bound>>20)
	}
	eventually(t, "the region is not back to its size after the writer stopped", func() bool {
		st, err := f.Stat()
		return err == nil && st.Size() == size
	})
}

// TestGrowthWatcherFollowsTheRegionsLifetime: a region replaced at the next container
// start is watched anew (its predecessor's descriptor released), GC's removal of the pod
// forgets its regions, and Sync watches regions made before the agent restarted.
func TestGrowthWatcherFollowsTheRegionsLifetime(t *testing.T) {
	size := regionSize(t)
	s, _ := watchedStore(t)
	if err := s.Prepare(rec("u-3", "a"), "version=1\n"); err != nil {
		t.Fatal(err)
	}
	region := filepath.Join(s.ContainerDir("u-3", "a"), RegionFileName)
	fds := func() int { es, _ := os.ReadDir("/proc/self/fd"); return len(es) }
	base := fds()
	if err := os.Chmod(region, 0o600); err != nil { // the container altered it: the next start replaces it
		t.Fatal(err)
	}
	old := inode(t, region)
	if err := s.WriteLimits("u-3", "a", "version=1\n"); err != nil {
		t.Fatal(err)
	}
	if inode(t, region) == old {
		t.Fatal("the altered region was not replaced")
	}
	if got := fds(); got != base {
		t.Errorf("descriptors %d after the replacement, want %d: the old region's is not released", got, base)
	}
	if err := os.Truncate(region, size*4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replacement region is not watched", func() bool {
		st, err := os.Stat(region)
		return err == nil && st.Size() == size
	})

	if err := s.RemovePod("u-3"); err != nil {
		t.Fatal(err)
	}
	if n := s.Growth.Watched(); n != 0 {
		t.Errorf("%d regions watched after the pod's removal, want 0", n)
	}

	// A region the watcher never saw (made before an agent restart) is watched at the next
	// GC pass.
	bare := &Store{Root: s.Root}
	if err := bare.Prepare(rec("u-4", "b"), "version=1\n"); err != nil {
		t.Fatal(err)
	}
	s.TrimRegions(mustRecords(t, s))
	if n := s.Growth.Watched(); n != 1 {
		t.Fatalf("%d regions watched after a GC pass, want 1", n)
	}
	later := filepath.Join(s.ContainerDir("u-4", "b"), RegionFileName)
	if err := os.Truncate(later, size*4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a region found by the GC pass is not watched", func() bool {
		st, err := os.Stat(later)
		return err == nil && st.Size() == size
	})
}

// TestGrowthWatcherRefusesWhatIsNotARegion: a FIFO or a symlink in the region's place is
// neither opened for long nor followed.
func TestGrowthWatcherRefusesWhatIsNotARegion(t *testing.T) {
	s, _ := watchedStore(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/etc/hostname", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		done := make(chan error, 1)
		go func() { done <- s.Growth.Watch(p) }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s was watched", p)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("watching %s hangs", p)
		}
	}
	if n := s.Growth.Watched(); n != 0 {
		t.Errorf("%d watched, want 0", n)
	}
}

func mustRecords(t *testing.T, s *Store) map[string][]*Record {
	t.Helper()
	recs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
