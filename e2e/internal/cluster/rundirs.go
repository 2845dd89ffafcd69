package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// The harness keeps each run's directory (logs, node state) after it ends, so that a
// failure can be read afterwards. Kept without end they fill the disk: about 250 MiB
// a run, and a host whose disk is nearly full makes the real-runtime kubelets report
// DiskPressure, evict their pods and taint their nodes, failing scenarios for a reason
// that has nothing to do with them.

// MinFreeDisk is the free space a run needs on the run directory's filesystem: the
// kubelets' eviction thresholds are 1 % of it, and a run writes a few hundred MiB.
const MinFreeDisk = 4 << 30

// PruneRunDirs removes all but the newest keep directories in dir whose names start
// with prefix (older runs of the harness), and returns the paths it removed.
func PruneRunDirs(dir, prefix string, keep int) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil {
		return nil, err
	}
	type run struct {
		path string
		mod  int64
	}
	var runs []run
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil || !fi.IsDir() {
			continue
		}
		runs = append(runs, run{m, fi.ModTime().UnixNano()})
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].mod > runs[j].mod })
	var removed []string
	for i := keep; i < len(runs); i++ {
		if err := os.RemoveAll(runs[i].path); err != nil {
			return removed, fmt.Errorf("remove an earlier run's directory: %w", err)
		}
		removed = append(removed, runs[i].path)
	}
	return removed, nil
}

// CheckFreeDisk returns an error naming the free space when dir's filesystem has less
// than need bytes free.
func CheckFreeDisk(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("free space of %s: %w", dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free < need {
		return fmt.Errorf("%s has %d MiB free, want at least %d MiB: the real-runtime kubelets would report DiskPressure and evict their pods; free some space (Go's build cache: go clean -cache)",
			dir, free>>20, need>>20)
	}
	return nil
}
