package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MemoryCgroup holds a process to a memory limit, as a container's limit would: a cgroup
// of its own (v2, or the v1 memory hierarchy) whose peak and OOM kills can be read back.
type MemoryCgroup struct {
	Dir string
	v2  bool
}

// NewMemoryCgroup creates a cgroup named name with a memory limit of limit bytes (and no
// swap beyond it, where the kernel accounts swap).
func NewMemoryCgroup(name string, limit int64) (*MemoryCgroup, error) {
	root := "/sys/fs/cgroup"
	cg := &MemoryCgroup{}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		cg.v2, cg.Dir = true, filepath.Join(root, name)
	} else {
		cg.Dir = filepath.Join(root, "memory", name)
	}
	if err := os.Mkdir(cg.Dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("memory cgroup %s (needs root): %w", cg.Dir, err)
	}
	file, swap := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
	if cg.v2 {
		file, swap = "memory.max", "memory.swap.max"
	}
	if err := os.WriteFile(filepath.Join(cg.Dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return nil, fmt.Errorf("memory cgroup %s: %s: %w", cg.Dir, file, err)
	}
	value := strconv.FormatInt(limit, 10)
	if cg.v2 {
		value = "0"
	}
	_ = os.WriteFile(filepath.Join(cg.Dir, swap), []byte(value), 0o644) // absent without swap accounting
	return cg, nil
}

// Add moves pid into the cgroup.
func (cg *MemoryCgroup) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(cg.Dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move %d into %s: %w", pid, cg.Dir, err)
	}
	return nil
}

// Peak is the most memory the cgroup has held, in bytes, and how many times the kernel
// killed a process of it for memory.
func (cg *MemoryCgroup) Peak() (peak int64, oomKills int64, err error) {
	peakFile := "memory.max_usage_in_bytes"
	if cg.v2 {
		peakFile = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(cg.Dir, peakFile))
	if err != nil {
		return 0, 0, err
	}
	if peak, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", peakFile, err)
	}
	events := "memory.oom_control"
	if cg.v2 {
		events = "memory.events"
	}
	b, err = os.ReadFile(filepath.Join(cg.Dir, events))
	if err != nil {
		return peak, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			oomKills, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	return peak, oomKills, nil
}

// Remove deletes the cgroup once its processes are gone.
func (cg *MemoryCgroup) Remove() error { return os.Remove(cg.Dir) }
