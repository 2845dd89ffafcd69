package records

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

func regionSize(t *testing.T) int64 {
	t.Helper()
	n, err := usage.RegionFileSize()
	if err != nil {
		t.Skip(err)
	}
	return n
}

func rec(uid, container string) *Record {
	return &Record{Namespace: "ns", Pod: "p", UID: uid, Container: container, SlotIDs: []string{"GPU-a::0"},
		Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 1000, Cores: 30}}, QoS: api.QoSFixedShare}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// names lists a directory, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// Allocate leaves everything the container's two mounts need: a zero region of the
// layout's size that anybody in the container may write (vgpu-core initialises it, see
// the hookenv contract test), a limits file nobody may change, in a directory only the
// agent reaches, and the agent's record beside it.
func TestPrepareCreatesTheRegionAndAReadOnlyLimitsFile(t *testing.T) {
	size := regionSize(t)
	s := &Store{Root: t.TempDir()}
	if err := s.Prepare(rec("u", "main"), "version=1\n"); err != nil {
		t.Fatal(err)
	}
	dir := s.ContainerDir("u", "main")
	if got := names(t, dir); strings.Join(got, ",") != "limits.env,region" {
		t.Fatalf("container directory holds %v, want exactly limits.env and region", got)
	}
	if m := mode(t, dir); !m.IsDir() || m.Perm() != 0o700 {
		t.Errorf("container directory mode %v, want drwx------", m)
	}
	region := filepath.Join(dir, RegionFileName)
	st, err := os.Stat(region)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != 0o666 || st.Size() != size || !ownedByMe(st) {
		t.Errorf("region: %v, %d bytes; want a regular 0666 file of %d bytes owned by the agent", st.Mode(), st.Size(), size)
	}
	b, err := os.ReadFile(region)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, make([]byte, size)) {
		t.Error("a fresh region is not all zero")
	}
	if _, err := usage.ReadFile(region); !errors.Is(err, usage.ErrNotRegion) {
		t.Errorf("reading a region no process initialised: %v, want %v (hook not loaded)", err, usage.ErrNotRegion)
	}
	limits := filepath.Join(dir, LimitsFileName)
	if m := mode(t, limits); !m.IsRegular() || m.Perm() != 0o444 {
		t.Errorf("limits.env mode %v, want -r--r--r--", m)
	}
	if m := mode(t, s.recordPath("u", "main")); m.Perm() != 0o600 {
		t.Errorf("record mode %v, want -rw-------", m)
	}
	if _, err := s.ReadRecord("u", "main"); err != nil {
		t.Fatal(err)
	}
}

// PreStartContainer rewrites the limits file before every start of the container. The new
// file replaces the old in one rename inside the agent-private directory: a reader sees
// the old file or the new one, whole, never a mixture, and the file stays read-only. The
// region the container's processes initialised is kept.
func TestWriteLimitsOnARestartReplacesTheFileAtomicallyAndKeepsItReadOnly(t *testing.T) {
	regionSize(t)
	s := &Store{Root: t.TempDir()}
	old := "version=1\nTESSERA_MEMORY_LIMIT_MIB=1000\n"
	if err := s.Prepare(rec("u", "main"), old); err != nil {
		t.Fatal(err)
	}
	dir := s.ContainerDir("u", "main")
	path := filepath.Join(dir, LimitsFileName)
	regionIno := inode(t, filepath.Join(dir, RegionFileName))
	// What a running container sees: its mount holds the old file.
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	renewed := "version=1\nTESSERA_MEMORY_LIMIT_MIB=2000\nTESSERA_SM_LIMIT=50\n"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var torn []string
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil {
				torn = append(torn, "missing: "+err.Error())
				continue
			}
			if got := string(b); got != old && got != renewed {
				torn = append(torn, got)
			}
		}
	}()
	for i := 0; i < 200; i++ {
		content := renewed
		if i%2 == 1 {
			content = old
		}
		if err := s.WriteLimits("u", "main", content); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteLimits("u", "main", renewed); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if len(torn) > 0 {
		t.Fatalf("a reader saw %d files that were neither the old nor the new one, e.g. %q", len(torn), torn[0])
	}
	if b, _ := os.ReadFile(path); string(b) != renewed {
		t.Fatalf("limits.env = %q, want %q", b, renewed)
	}
	if m := mode(t, path); m.Perm() != 0o444 {
		t.Errorf("rewritten limits.env mode %v, want -r--r--r--", m)
	}
	b := make([]byte, 100)
	if n, _ := held.ReadAt(b, 0); string(b[:n]) != old {
		t.Errorf("the file a running container holds changed under it: %q", b[:n])
	}
	if got := names(t, dir); strings.Join(got, ",") != "limits.env,region" {
		t.Errorf("after the rewrites the directory holds %v (a temporary file left behind?)", got)
	}
	if inode(t, filepath.Join(dir, RegionFileName)) != regionIno {
		t.Error("a region as the agent made it was replaced on a restart")
	}
}

// A container's processes may write their region (it is mounted read-write) and, as root
// in the container, resize or chmod it; containers set up before the two single-file
// mounts could even replace it. Before the next start the agent puts a fresh region there.
func TestWriteLimitsReplacesARegionTheContainerAltered(t *testing.T) {
	size := regionSize(t)
	hostFile := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(hostFile, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		alter func(path string) error
	}{
		{"grown to 1 GiB", func(p string) error { return os.Truncate(p, 1<<30) }},
		{"truncated to nothing", func(p string) error { return os.Truncate(p, 0) }},
		{"made private", func(p string) error { return os.Chmod(p, 0o600) }},
		{"made setuid", func(p string) error { return os.Chmod(p, 0o4777) }},
		{"replaced by a FIFO", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return syscall.Mkfifo(p, 0o666)
		}},
		{"replaced by a symbolic link to a host file", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink(hostFile, p)
		}},
		{"replaced by a directory of files", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "sub", "junk"), []byte("x"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{Root: t.TempDir()}
			if err := s.Prepare(rec("u", "main"), "version=1\n"); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(s.ContainerDir("u", "main"), RegionFileName)
			if err := tc.alter(path); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteLimits("u", "main", "version=1\n"); err != nil {
				t.Fatal(err)
			}
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Mode().IsRegular() || st.Mode().Perm() != 0o666 || st.Mode()&os.ModeSetuid != 0 || st.Size() != size {
				t.Errorf("region after the restart: %v, %d bytes; want a fresh regular 0666 file of %d bytes", st.Mode(), st.Size(), size)
			}
			if b, _ := os.ReadFile(hostFile); string(b) != "host secret" {
				t.Errorf("the host file behind a link was changed: %q", b)
			}
		})
	}
}

func TestUnsafeNamesAreRefused(t *testing.T) {
	s := &Store{Root: t.TempDir()}
	for _, r := range []*Record{rec("..", "main"), rec("u", "a/b"), rec("", "main"), rec("u", ".")} {
		if err := s.Prepare(r, "version=1\n"); !errors.Is(err, ErrBadName) {
			t.Errorf("Prepare(%q, %q): %v, want %v", r.UID, r.Container, err, ErrBadName)
		}
		if err := s.WriteLimits(r.UID, r.Container, "version=1\n"); !errors.Is(err, ErrBadName) {
			t.Errorf("WriteLimits(%q, %q): %v, want %v", r.UID, r.Container, err, ErrBadName)
		}
	}
}

func TestTmpfsIsSkippedSayingWhy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store *Store
		why   string
	}{
		{"size 0", &Store{TmpfsBytes: 0}, "disabled"},
		{"too small for a region", &Store{TmpfsBytes: 4096}, "cannot hold a region"},
		{"mounts that would not reach the runtime", &Store{TmpfsBytes: 1 << 20,
			mountsReachRuntime: func(string) (bool, string) { return false, "does not propagate to the host" }}, "propagate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.store.Root = t.TempDir()
			if tc.name == "mounts that would not reach the runtime" {
				if ok, why := canMount(); !ok {
					tc.why = why // this machine says no earlier
				}
			}
			on, why := tc.store.TmpfsState()
			if on || !strings.Contains(why, tc.why) {
				t.Fatalf("TmpfsState = %v, %q; want off, saying %q", on, why, tc.why)
			}
			if err := tc.store.Prepare(rec("u", "main"), "version=1\n"); err != nil {
				t.Fatalf("without a tmpfs the directory still works: %v", err)
			}
		})
	}
}

func TestSharedMountFindsTheMountHoldingThePath(t *testing.T) {
	const mountinfo = `22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 22 254:0 /var/lib/tessera /var/lib/tessera rw,relatime shared:7 - ext4 /dev/vda rw
31 22 254:0 /var/lib/kubelet /var/lib/kubelet rw,relatime master:3 - ext4 /dev/vda rw
32 22 0:40 / /var/lib/with\040space rw shared:9 - tmpfs tmpfs rw
33 30 0:41 / /var/lib/tessera/private rw - tmpfs tmpfs rw
`
	for _, tc := range []struct {
		path, mount string
		shared      bool
	}{
		{"/var/lib/tessera", "/var/lib/tessera", true},
		{"/var/lib/tessera/pods/u/main", "/var/lib/tessera", true},
		{"/var/lib/tessera-other", "/", false},
		{"/var/lib/kubelet/x", "/var/lib/kubelet", false}, // HostToContainer: receives, does not send
		{"/var/lib/with space/x", "/var/lib/with space", true},
		{"/var/lib/tessera/private/x", "/var/lib/tessera/private", false},
	} {
		mount, shared := sharedMount([]byte(mountinfo), tc.path)
		if mount != tc.mount || shared != tc.shared {
			t.Errorf("sharedMount(%s) = %s, %v; want %s, %v", tc.path, mount, shared, tc.mount, tc.shared)
		}
	}
}

// withTmpfs is a store that mounts a tmpfs of size on each container directory: only
// where this test may mount (root with CAP_SYS_ADMIN); it skips otherwise.
func withTmpfs(t *testing.T, size int64) *Store {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	if ok, why := canMount(); !ok {
		t.Skip(why)
	}
	probe := t.TempDir()
	if err := mountTmpfs(probe, 1<<20); err != nil {
		t.Skipf("this machine lets no test mount a tmpfs: %v", err)
	}
	if err := unmountTmpfs(probe); err != nil {
		t.Fatal(err)
	}
	s := &Store{Root: t.TempDir(), TmpfsBytes: size, mountsReachRuntime: func(string) (bool, string) { return true, "" }}
	t.Cleanup(func() {
		recs, _ := s.Records()
		for uid := range recs {
			_ = s.RemovePod(uid)
		}
	})
	return s
}

// With a tmpfs per container directory, a container that grows its region and writes into
// it runs out of space in its own tmpfs (ENOSPC) while the state directory's filesystem and
// the other containers' directories are untouched; its next start gets a fresh region, and
// GC unmounts and removes it all. Needs root (skipped otherwise).
func TestATmpfsPerContainerKeepsWhatAContainerWritesInsideIt(t *testing.T) {
	size := regionSize(t)
	s := withTmpfs(t, 1<<20)
	if on, why := s.TmpfsState(); !on {
		t.Fatalf("tmpfs off: %s", why)
	}
	for _, c := range []string{"greedy", "neighbour"} {
		if err := s.Prepare(rec("u-"+c, c), "version=1\n"); err != nil {
			t.Fatal(err)
		}
	}
	greedy, neighbour := s.ContainerDir("u-greedy", "greedy"), s.ContainerDir("u-neighbour", "neighbour")
	for _, dir := range []string{greedy, neighbour} {
		if ok, err := isTmpfsMount(dir); err != nil || !ok {
			t.Fatalf("%s is not a tmpfs mount: %v", dir, err)
		}
		if m := mode(t, dir); m.Perm() != 0o700 {
			t.Errorf("%s mode %v, want drwx------", dir, m)
		}
	}
	var before syscall.Statfs_t
	if err := syscall.Statfs(s.Root, &before); err != nil {
		t.Fatal(err)
	}

	// What a process of the greedy container can do through its read-write region mount.
	f, err := os.OpenFile(filepath.Join(greedy, RegionFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil { // sparse: costs nothing yet
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{0xAB}, 64<<10)
	var written int64
	for off := size; written < 16<<20; off += int64(len(chunk)) {
		n, err := f.WriteAt(chunk, off)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("writing into the grown region: %v, want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if written >= 1<<20 {
		t.Fatalf("the container wrote %d bytes past its region in a 1 MiB tmpfs", written)
	}
	var after syscall.Statfs_t
	if err := syscall.Statfs(s.Root, &after); err != nil {
		t.Fatal(err)
	}
	if used := (int64(before.Bfree) - int64(after.Bfree)) * int64(after.Bsize); used > 1<<20 {
		t.Errorf("the state directory's filesystem lost %d bytes", used)
	}

	// The neighbour restarts as usual, and so does the greedy container, with a fresh region.
	if err := s.WriteLimits("u-neighbour", "neighbour", "version=1\nTESSERA_QOS=fixed-share\n"); err != nil {
		t.Fatalf("the neighbour's restart: %v", err)
	}
	if err := s.WriteLimits("u-greedy", "greedy", "version=1\nTESSERA_QOS=fixed-share\n"); err != nil {
		t.Fatalf("the greedy container's restart: %v", err)
	}
	if st, err := os.Stat(filepath.Join(greedy, RegionFileName)); err != nil || st.Size() != size {
		t.Fatalf("greedy region after its restart: %v, %v", st, err)
	}

	// GC: unmounted and gone.
	if err := s.RemovePod("u-greedy"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(greedy); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after GC: %v", err)
	}
	if ok, _ := isTmpfsMount(neighbour); !ok {
		t.Fatal("GC of one pod unmounted another's tmpfs")
	}
}

// Without a tmpfs, GC cuts a region its container grew back to a region's size each pass:
// the region's own bytes stay (the container's processes go on), what was written past
// them is given back. Files that are not regular are left alone, and nothing blocks.
func TestTrimRegionsGivesBackWhatAContainerWrotePastItsRegion(t *testing.T) {
	size := regionSize(t)
	s := &Store{Root: t.TempDir()}
	for _, c := range []string{"grown", "intact", "fifo"} {
		if err := s.Prepare(rec("u-"+c, c), "version=1\n"); err != nil {
			t.Fatal(err)
		}
	}
	grown := filepath.Join(s.ContainerDir("u-grown", "grown"), RegionFileName)
	f, err := os.OpenFile(grown, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("vgpu-core's"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 1<<20), size+4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(s.ContainerDir("u-fifo", "fifo"), RegionFileName)
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.TrimRegions(recs); len(got) != 1 || got[0] != grown {
		t.Fatalf("trimmed %v, want only %s", got, grown)
	}
	b, err := os.ReadFile(grown)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != size || string(b[:11]) != "vgpu-core's" {
		t.Fatalf("after the trim: %d bytes starting %q; want the region's %d bytes, kept", len(b), b[:11], size)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode().Type() != os.ModeNamedPipe {
		t.Fatalf("the FIFO: %v, %v", st, err)
	}
	if got := s.TrimRegions(recs); len(got) != 0 {
		t.Fatalf("a second pass trimmed %v", got)
	}
}
