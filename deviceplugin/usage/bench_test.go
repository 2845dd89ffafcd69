package usage

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReadFile is the per-container cost of a scrape: a region with 8 live processes.
func BenchmarkReadFile(b *testing.B) {
	r := &Region{Version: LayoutVersion}
	for i := 0; i < 8; i++ {
		r.Procs = append(r.Procs, Proc{Slot: i * 3, PID: int32(100 + i), StartTime: 5, Used: [MaxCards]uint64{0: 1 << 30}})
	}
	buf, err := Encode(r)
	if err != nil {
		b.Skip(err)
	}
	path := filepath.Join(b.TempDir(), "region")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanProcs is the once-per-scrape cost of reading the host's process table.
func BenchmarkScanProcs(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := ScanProcs("/proc"); err != nil {
			b.Fatal(err)
		}
	}
}
