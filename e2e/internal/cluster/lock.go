package cluster

import (
	"fmt"
	"os"
	"syscall"
)

// Lock takes an exclusive flock(2) on file and holds it until unlock is called (or the
// process ends): the programs that bring up a whole cluster for a long run take it so that
// one such cluster runs at a time on a machine. An empty file name takes no lock.
func Lock(file string) (unlock func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", file, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
