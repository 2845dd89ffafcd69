package usage

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fakeProc writes what ScanProcs and Alive read of one host process under root: its stat
// line (state and start time), its status (NSpid, host to innermost) and an exec marker
// at descriptor 512 when marker is not zero.
func fakeProc(t *testing.T, root string, hostPID int, state string, start uint64, nspid []int, marker uint64) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(hostPID))
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat := strconv.Itoa(hostPID) + " (vgpu-probe) " + state + " 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " +
		strconv.FormatUint(start, 10) + " 0 0"
	ns := ""
	for _, n := range nspid {
		ns += "\t" + strconv.Itoa(n)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tvgpu-probe\nNSpid:"+ns+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if marker != 0 {
		link := "pipe:[" + strconv.FormatUint(marker, 10) + "]"
		if err := os.Symlink(link, filepath.Join(dir, "fd", "512")); err != nil {
			t.Fatal(err)
		}
	}
}

// Two containers start the same program at the same clock tick: each container's process
// is pid 7 in its own namespace with the same start time, and only their exec markers
// differ. Each slot must find its own process, whichever host process the scan lists
// first (the end-to-end harness saw a non-root container's live process counted as dead
// because its twin in a sibling container was listed before it).
func TestLivenessTellsTwinProcessesOfTwoContainersApartByTheirMarkers(t *testing.T) {
	root := t.TempDir()
	const start = 4242
	fakeProc(t, root, 201, "S", start, []int{201, 7}, 1111) // the first container's process
	fakeProc(t, root, 202, "S", start, []int{202, 7}, 2222) // the second container's twin
	fakeProc(t, root, 203, "Z", start, []int{203, 7}, 3333) // a third container's, a zombie
	table, err := ScanProcs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		marker uint64
		alive  bool
	}{
		{1111, true},  // the process listed first
		{2222, true},  // its twin, listed after it: the case that was counted dead
		{3333, false}, // a zombie is dead even with its marker
		{4444, false}, // no process holds this marker: the slot's process exec'd or exited
	} {
		p := Proc{PID: 7, StartTime: start, MarkerFD: 512, MarkerIno: c.marker}
		if got := table.Alive(p); got != c.alive {
			t.Errorf("slot with marker %d: alive = %v, want %v", c.marker, got, c.alive)
		}
	}
	// A slot of another inner pid is none of them.
	if table.Alive(Proc{PID: 8, StartTime: start, MarkerFD: 512, MarkerIno: 2222}) {
		t.Error("a slot of pid 8 was matched to a process that is pid 7 in its namespace")
	}
}
