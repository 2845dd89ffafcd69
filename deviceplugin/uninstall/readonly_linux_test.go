package uninstall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// As the chart runs the agent: the hook library's directory a read-only bind mount (root
// only). The kernel's EROFS is what Remove expects.
func TestRemoveOnAReadOnlyBindMountOfTheHookLibrary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	f, paths := host(t)
	dir := filepath.Dir(f.HookLibrary)
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("remount read-only: %v", err)
	}
	if err := os.Remove(f.HookLibrary); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("removing from the read-only mount: %v, want EROFS", err)
	}
	if err := Remove(context.Background(), lister{}, resource, f); err != nil {
		t.Fatalf("Remove: %v; a read-only hook library is expected, not an error", err)
	}
	if !exists(f.HookLibrary) {
		t.Error("the library on a read-only mount is gone")
	}
	for _, p := range paths[1:] {
		if exists(p) {
			t.Errorf("%s exists after Remove", p)
		}
	}
}
