package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// watchFaults lets the end-to-end harness break a card from outside the process: a file
// xid-<index> appearing in dir, holding an XID number, makes card <index> of the fake
// machine report that XID as a critical NVML event; the file is removed once injected.
// A file processes-<index> is what NVML lists as the card's compute processes while it
// exists, one "<pid> <bytes>" per line (the memory guard's view of who holds the card).
func watchFaults(ctx context.Context, dir string, m *nvmlfake.Machine) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	listed := map[int]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		files, _ := filepath.Glob(filepath.Join(dir, "xid-*"))
		for _, f := range files {
			if err := injectFromFile(f, m); err != nil {
				klog.ErrorS(err, "Cannot inject a fault", "file", f)
			}
			_ = os.Remove(f)
		}
		for i := range m.Devices {
			procs, err := processesFromFile(filepath.Join(dir, fmt.Sprintf("processes-%d", i)))
			switch {
			case errors.Is(err, os.ErrNotExist):
				if listed[i] {
					m.SetProcesses(i, nil)
					delete(listed, i)
				}
			case err != nil:
				klog.ErrorS(err, "Cannot list a card's processes", "card", i)
			default:
				m.SetProcesses(i, procs)
				listed[i] = true
			}
		}
	}
}

func processesFromFile(f string) ([]nvml.ProcessInfo, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	var out []nvml.ProcessInfo
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var pid uint32
		var used uint64
		if _, err := fmt.Sscanf(line, "%d %d", &pid, &used); err != nil {
			return nil, fmt.Errorf("%s: line %q: want \"<pid> <bytes>\": %w", filepath.Base(f), line, err)
		}
		out = append(out, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: used})
	}
	return out, nil
}

func injectFromFile(f string, m *nvmlfake.Machine) error {
	i, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), "xid-"))
	if err != nil || i < 0 || i >= len(m.Devices) {
		return fmt.Errorf("%s names no card of the machine (%d cards)", filepath.Base(f), len(m.Devices))
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	xid, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("XID %q: %w", strings.TrimSpace(string(b)), err)
	}
	klog.InfoS("Injecting an XID", "card", i, "xid", xid)
	m.InjectXID(i, xid)
	return nil
}
