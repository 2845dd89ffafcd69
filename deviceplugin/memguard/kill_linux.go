package memguard

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// ErrNotThePod is returned when the pid now names a process of another pod (or none): the
// process the guard judged has exited and its number was reused.
var ErrNotThePod = errors.New("the process is no longer the pod's")

// PidfdKiller sends SIGKILL through a pidfd: the process is pinned first, then its cgroup
// is read again, so a pid reused since NVML listed it is never signalled.
type PidfdKiller struct {
	// ProcRoot is the procfs of the agent's own pid namespace (default /proc).
	ProcRoot string
}

// Kill implements Killer.
func (k PidfdKiller) Kill(pid int, pod types.UID) error {
	root := k.ProcRoot
	if root == "" {
		root = "/proc"
	}
	if pid <= 1 {
		return fmt.Errorf("process %d: %w", pid, ErrNotThePod)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	got, err := podOfPID(root, pid)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotThePod, err)
	}
	if got != pod {
		return fmt.Errorf("process %d is in pod %s, not %s: %w", pid, got, pod, ErrNotThePod)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return fmt.Errorf("pidfd_send_signal %d: %w", pid, err)
	}
	return nil
}
