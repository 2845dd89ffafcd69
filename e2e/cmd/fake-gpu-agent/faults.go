package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// watchFaults lets the end-to-end harness break a card from outside the process: a file
// xid-<index> appearing in dir, holding an XID number, makes card <index> of the fake
// machine report that XID as a critical NVML event; the file is removed once injected.
func watchFaults(ctx context.Context, dir string, m *nvmlfake.Machine) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
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
	}
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
