package uninstall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/internal/testing/klogtest"
)

// readOnlyUnder makes removeFile fail as a read-only mount of dir would (EROFS), for the
// rest of the test.
func readOnlyUnder(t *testing.T, dir string) {
	t.Helper()
	orig := removeFile
	removeFile = func(p string) error {
		if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return &os.PathError{Op: "remove", Path: p, Err: syscall.EROFS}
		}
		return orig(p)
	}
	t.Cleanup(func() { removeFile = orig })
}

// The chart mounts the hook library's directory read-only in the agent and removes the
// library with its cleanup container once the state directory is empty: Remove empties
// the state directory, removes the CDI spec, leaves the library without an error and says
// so at -v=2 only.
func TestRemoveLeavesAReadOnlyHookLibraryToTheChartsCleanup(t *testing.T) {
	f, paths := host(t)
	readOnlyUnder(t, filepath.Dir(f.HookLibrary))
	logs := klogtest.Capture(t, 2)
	if err := Remove(context.Background(), lister{}, resource, f); err != nil {
		t.Fatalf("Remove: %v; a read-only hook library is expected, not an error", err)
	}
	if !exists(f.HookLibrary) {
		t.Error("the library on a read-only directory is gone")
	}
	for _, p := range paths[1:] {
		if exists(p) {
			t.Errorf("%s exists after Remove: the cleanup container waits for an empty state directory", p)
		}
	}
	if exists(f.StateDir) {
		t.Errorf("state directory %s kept", f.StateDir)
	}
	klog.Flush()
	out := logs.String()
	if !strings.Contains(out, "Hook library left to the chart's cleanup step") || !strings.Contains(out, f.HookLibrary) {
		t.Errorf("no -v=2 message about the library left to the chart's cleanup; logs:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "E") || strings.HasPrefix(l, "W") {
			t.Errorf("logged above info: %s", l)
		}
	}
}

// Other failures to remove the library are still errors, and the rest is still removed.
func TestRemoveReportsOtherHookLibraryErrors(t *testing.T) {
	f, _ := host(t)
	orig := removeFile
	removeFile = func(p string) error {
		if p == f.HookLibrary {
			return &os.PathError{Op: "remove", Path: p, Err: syscall.EACCES}
		}
		return orig(p)
	}
	t.Cleanup(func() { removeFile = orig })
	err := Remove(context.Background(), lister{}, resource, f)
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("Remove: %v, want the EACCES removing the library", err)
	}
	if exists(f.StateDir) || exists(f.CDISpec) {
		t.Error("the state directory or the CDI spec was kept because the library could not go")
	}
}
