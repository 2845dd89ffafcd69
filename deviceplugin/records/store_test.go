package records

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

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

// Allocate leaves what the container's one mount needs: a limits file nobody may change,
// in a directory only the agent reaches, and the agent's record beside it. Nothing the
// container can write is on the host: its region lives in its own pod.
func TestPrepareCreatesAReadOnlyLimitsFileAndNothingElse(t *testing.T) {
	s := &Store{Root: t.TempDir()}
	if err := s.Prepare(rec("u", "main"), "version=1\n"); err != nil {
		t.Fatal(err)
	}
	dir := s.ContainerDir("u", "main")
	if got := names(t, dir); strings.Join(got, ",") != "limits.env" {
		t.Fatalf("container directory holds %v, want exactly limits.env", got)
	}
	if m := mode(t, dir); !m.IsDir() || m.Perm() != 0o700 {
		t.Errorf("container directory mode %v, want drwx------", m)
	}
	limits := filepath.Join(dir, LimitsFileName)
	if m := mode(t, limits); !m.IsRegular() || m.Perm() != 0o444 {
		t.Errorf("limits.env mode %v, want -r--r--r--", m)
	}
	if m := mode(t, s.recordPath("u", "main")); m.Perm() != 0o600 {
		t.Errorf("record mode %v, want -rw-------", m)
	}
	r := rec("u", "main")
	r.RegionVolume = true
	if err := s.Prepare(r, "version=1\n"); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadRecord("u", "main")
	if err != nil {
		t.Fatal(err)
	}
	if !got.RegionVolume {
		t.Error("the record lost where the container keeps its region")
	}
}

// PreStartContainer rewrites the limits file before every start of the container. The new
// file replaces the old in one rename inside the agent-private directory: a reader sees
// the old file or the new one, whole, never a mixture, and the file stays read-only.
func TestWriteLimitsOnARestartReplacesTheFileAtomicallyAndKeepsItReadOnly(t *testing.T) {
	s := &Store{Root: t.TempDir()}
	old := "version=1\nTESSERA_MEMORY_LIMIT_MIB=1000\n"
	if err := s.Prepare(rec("u", "main"), old); err != nil {
		t.Fatal(err)
	}
	dir := s.ContainerDir("u", "main")
	path := filepath.Join(dir, LimitsFileName)
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
	if got := names(t, dir); strings.Join(got, ",") != "limits.env" {
		t.Errorf("after the rewrites the directory holds %v (a temporary file left behind?)", got)
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
