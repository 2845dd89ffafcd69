//go:build !linux

package records

import (
	"errors"
	"os"
)

func canMount() (bool, string) { return false, "container directories get a tmpfs on Linux only" }

func mountsReachRuntime(string) (bool, string) { return false, "not Linux" }

func mountTmpfs(string, int64) error { return errors.New("tmpfs mounts are Linux only") }

func unmountTmpfs(string) error { return nil }

func reserve(f *os.File, size int64) error { return f.Truncate(size) }

func ownedByMe(os.FileInfo) bool { return true }
