package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPruneRunDirsKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	for i, name := range []string{"tessera-e2e-a", "tessera-e2e-b", "tessera-e2e-c", "tessera-e2e-d"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "logs"), 0o755); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// Neither another prefix nor a plain file is touched.
	if err := os.Mkdir(filepath.Join(dir, "other-run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tessera-e2e-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := PruneRunDirs(dir, "tessera-e2e-", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 || !strings.HasSuffix(removed[0], "-b") || !strings.HasSuffix(removed[1], "-a") {
		t.Fatalf("removed %v, want the two oldest runs (b, then a)", removed)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	want := []string{"other-run", "tessera-e2e-c", "tessera-e2e-d", "tessera-e2e-file"}
	if len(left) != len(want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	for i, p := range left {
		if filepath.Base(p) != want[i] {
			t.Fatalf("left %v, want %v", left, want)
		}
	}
}

func TestCheckFreeDiskNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	if err := CheckFreeDisk(dir, 1); err != nil {
		t.Fatalf("one byte: %v", err)
	}
	err := CheckFreeDisk(dir, 1<<62)
	if err == nil || !strings.Contains(err.Error(), "MiB free, want at least") || !strings.Contains(err.Error(), "DiskPressure") {
		t.Fatalf("an impossible need: %v", err)
	}
}
