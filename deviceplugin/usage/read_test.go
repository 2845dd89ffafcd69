package usage

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The region file lies in a directory a container's processes could once write to: the
// reader must survive whatever they put at its path. These tests put it there.

func linuxOnly(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("regions exist on Linux nodes only")
	}
}

// validRegion writes a region with two registered processes and returns its path and
// what it decodes to.
func validRegion(t testing.TB, dir string) (string, *Region) {
	t.Helper()
	r := newRegion(t)
	r.card(0, 300, true, 40, 7)
	r.proc(3, 17, 1000, 100, 200)
	r.proc(900, 18, 2000, 200, 500)
	path := filepath.Join(dir, "region")
	if err := os.WriteFile(path, r.b, 0o666); err != nil {
		t.Fatal(err)
	}
	want, err := Decode(r.b, r.l)
	if err != nil {
		t.Fatal(err)
	}
	return path, want
}

// readPromptly calls ReadFile and fails the test when it takes more than a second.
func readPromptly(t *testing.T, path string) (*Region, error) {
	t.Helper()
	type result struct {
		r   *Region
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := ReadFile(path)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-time.After(time.Second):
		t.Fatalf("ReadFile(%s) still running after a second", path)
		return nil, nil
	}
}

// goroutinesSettle waits for the goroutine count to come back to at most n.
func goroutinesSettle(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < 100 && runtime.NumGoroutine() > n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > n {
		t.Fatalf("%d goroutines after the reads, %d before: a read left one behind", got, n)
	}
}

func TestReadFileRefusesAFIFOAtOnceAndLeavesNoGoroutine(t *testing.T) {
	linuxOnly(t)
	path := filepath.Join(t.TempDir(), "region")
	if err := syscall.Mkfifo(path, 0o666); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for i := 0; i < 20; i++ { // every scrape of a container that made its region a FIFO
		_, err := readPromptly(t, path)
		if !errors.Is(err, ErrNotRegularFile) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "FIFO") {
			t.Fatalf("ReadFile of a FIFO: %v, want %v naming the path and the FIFO", err, ErrNotRegularFile)
		}
	}
	goroutinesSettle(t, before)
}

func TestReadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	linuxOnly(t)
	other, _ := validRegion(t, t.TempDir()) // a readable region elsewhere: a symlink must not lead to it
	for _, tc := range []struct {
		name, kind string
		make       func(path string) error
	}{
		{"a symbolic link to another file", "symbolic link", func(path string) error { return os.Symlink(other, path) }},
		{"a symbolic link to a host file", "symbolic link", func(path string) error { return os.Symlink("/etc/hostname", path) }},
		{"a directory", "directory", func(path string) error { return os.Mkdir(path, 0o755) }},
		{"a unix socket", "socket", func(path string) error {
			l, err := net.Listen("unix", path)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "region")
			if err := tc.make(path); err != nil {
				t.Skip(err)
			}
			r, err := readPromptly(t, path)
			if !errors.Is(err, ErrNotRegularFile) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.kind) {
				t.Fatalf("ReadFile: %v (region %+v), want %v naming the path and %q", err, r, ErrNotRegularFile, tc.kind)
			}
		})
	}
}

func TestReadFileRefusesACharacterDevice(t *testing.T) {
	linuxOnly(t)
	path := filepath.Join(t.TempDir(), "region")
	// A copy of /dev/null's node (1, 3): only root may create one.
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Skipf("cannot create a device node here (not root?): %v", err)
	}
	if _, err := readPromptly(t, path); !errors.Is(err, ErrNotRegularFile) || !strings.Contains(err.Error(), "character device") {
		t.Fatalf("ReadFile of a device: %v, want %v naming a character device", err, ErrNotRegularFile)
	}
}

// readBytes is how many bytes this process has read so far (rchar of /proc/self/io).
func readBytes(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

func TestReadFileRefusesAHugeSparseRegionReadingOnlyItsHeader(t *testing.T) {
	linuxOnly(t)
	for _, tc := range []struct {
		name    string
		version uint32
		want    error
	}{
		{"a region of this layout grown by its container", LayoutVersion, ErrSize},
		{"a larger region of another layout", LayoutVersion + 1, ErrLayout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path, _ := validRegion(t, dir)
			if tc.version != LayoutVersion {
				b, _ := os.ReadFile(path)
				b[offVersion] = byte(tc.version)
				if err := os.WriteFile(path, b, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Truncate(path, 1<<40); err != nil { // 1 TiB, sparse
				t.Skipf("this filesystem holds no 1 TiB sparse file: %v", err)
			}
			before := readBytes(t)
			start := time.Now()
			_, err := readPromptly(t, path)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ReadFile of a 1 TiB region: %v, want %v", err, tc.want)
			}
			if read := readBytes(t) - before; read > 4096 {
				t.Errorf("refusing it read %d bytes; only the header should be read", read)
			}
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Errorf("refusing it took %v", d)
			}
		})
	}
}

func TestReadFileOfAShrunkRegionSaysSo(t *testing.T) {
	linuxOnly(t)
	path, _ := validRegion(t, t.TempDir())
	l, _ := nativeLayout()
	for _, size := range []int64{0, 100, int64(l.readLen()), int64(l.Size) - 8} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(path); !errors.Is(err, ErrSize) || !strings.Contains(err.Error(), strconv.FormatInt(size, 10)+" bytes") {
			t.Errorf("ReadFile of a region cut to %d bytes: %v, want %v naming the size", size, err, ErrSize)
		}
	}
}

// A process of the container truncates and rewrites its region while the agent reads it
// (the old reader mapped the file and died of SIGBUS): every read gives an error or the
// region's true content, never a crash or a mixture. Run with -race.
func TestReadFileWhileTheRegionIsTruncatedAndRewritten(t *testing.T) {
	linuxOnly(t)
	path, want := validRegion(t, t.TempDir())
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := f.Truncate(0); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				runtime.Gosched()
			}
			if _, err := f.WriteAt(content, 0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var ok, refused int
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 3000 && time.Now().Before(deadline); i++ {
		r, err := ReadFile(path)
		if err != nil {
			if !errors.Is(err, ErrSize) && !errors.Is(err, ErrNotRegion) {
				t.Fatalf("read %d: %v, want a size error or a valid region", i, err)
			}
			refused++
			continue
		}
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("read %d decoded %+v, want the region's content %+v", i, r, want)
		}
		ok++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads gave the region, %d were refused", ok, refused)
}

func TestReadFileReadsARegionUnchangedAndOnlyByPread(t *testing.T) {
	linuxOnly(t)
	path, want := validRegion(t, t.TempDir())
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadFile = %+v, want %+v", got, want)
	}
	// No mapping of the region outlives the read.
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	if bytes.Contains(maps, []byte(path)) {
		t.Fatalf("the region is still mapped after ReadFile:\n%s", maps)
	}
}

func TestStableReadCopiesAPartUntilTwoCopiesAgree(t *testing.T) {
	linuxOnly(t)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("settled!"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dst := []byte("torn....") // the first copy, taken mid-update
	if err := stableRead(int(f.Fd()), dst, make([]byte, len(dst)), 0); err != nil {
		t.Fatal(err)
	}
	if string(dst) != "settled!" {
		t.Fatalf("after the copies agree: %q", dst)
	}
}

// FuzzReadRegion writes arbitrary bytes as a region file and reads it with ReadFile: as
// they are, and laid over the start of a zero region of exactly the right size (so the
// fuzzer reaches the slots). ReadFile must never panic, and what it accepts must be sane.
func FuzzReadRegion(f *testing.F) {
	linuxOnly(f)
	r := newRegion(f)
	r.proc(0, 7, 9, 1, 2, 3)
	f.Add(r.b[:r.l.Procs+2*procSize])
	f.Add(r.b[:100])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		padded := make([]byte, r.l.Size)
		copy(padded, b)
		for i, in := range [][]byte{b, padded} {
			path := filepath.Join(dir, "region"+strconv.Itoa(i))
			if err := os.WriteFile(path, in, 0o600); err != nil {
				t.Fatal(err)
			}
			d, err := ReadFile(path)
			if err != nil {
				continue
			}
			if len(in) != r.l.Size || len(d.Procs) > MaxProcs || d.Version != LayoutVersion {
				t.Fatalf("accepted a %d-byte file with %d procs of version %d", len(in), len(d.Procs), d.Version)
			}
			for _, p := range d.Procs {
				if p.PID == 0 {
					t.Fatalf("free slot %d read as a process", p.Slot)
				}
			}
		}
	})
}

// A container fills all of its region's slots with the start time many host processes
// share (those started at boot): the liveness check still reads each host process's
// status once per scrape, not once per slot.
func TestLivenessReadsEachHostProcessOnceWhateverTheSlotsSay(t *testing.T) {
	root := t.TempDir()
	const hostProcs = 50
	for pid := 100; pid < 100+hostProcs; pid++ {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(pid) + " (kthread) S 2 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tkthread\nNSpid:\t"+strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	table, err := ScanProcs(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for slot := 0; slot < MaxProcs; slot++ {
		if table.Alive(Proc{Slot: slot, PID: int32(5000 + slot), StartTime: 5}) {
			n++
		}
	}
	if n != 0 {
		t.Fatalf("%d slots naming no host process count as alive", n)
	}
	if len(table.nspid) != hostProcs {
		t.Fatalf("looked up %d host processes, want each of the %d once", len(table.nspid), hostProcs)
	}
}
