// Package buildinfo says which Tessera build a binary is. Release builds set Version and
// Revision with the linker (-X); a plain `go build` in a checkout falls back to the
// commit Go recorded in the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by `make images` / `make release`:
//
//	-ldflags "-X github.com/tessera-gpu/tessera/internal/buildinfo.Version=0.1.0
//	          -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=<commit>"
var (
	Version  = "dev"
	Revision = ""
)

// Commit is the source revision: the linker's value, else the one Go stamped from the
// checkout (with "-dirty" when it had uncommitted changes), else "unknown".
func Commit() string {
	if Revision != "" {
		return Revision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + dirty
}

// String is the one line every binary prints for --version, e.g.
// "vc-scheduler 0.1.0 (commit 2af9b3e…, go1.26.8 linux/amd64)".
func String(program string) string {
	return fmt.Sprintf("%s %s (commit %s, %s %s/%s)", program, Version, Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
