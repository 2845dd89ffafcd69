package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// stopGrace is how long the runtime has to stop on SIGTERM before the namespace ends.
const stopGrace = 10 * time.Second

// runNode is the init of a real-runtime node: the first process of its own mount and PID
// namespaces (the harness clones it so). It makes the namespace's mounts, starts the
// runtime (args), reaps whatever is orphaned in the namespace (the runtime's shims and
// containers, kubelets that joined), and ends when the runtime does, or on SIGTERM after
// passing it on. Its end ends the namespace: the kernel kills every process left in it,
// and the namespace's mounts go with them.
func runNode(plugins, sysctlDir string, args []string) error {
	if os.Getpid() != 1 {
		return errors.New("--node-init must be the first process of a new PID namespace (and of a new mount namespace)")
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// This namespace's own processes, for the runtime, runc and the kubelet.
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	// containerd's shim sockets live under /run/containerd whatever its configuration says.
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs on /run: %w", err)
	}
	if err := kubeletMounts(plugins, sysctlDir); err != nil {
		return err
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	rt := exec.Command(args[0], args[1:]...)
	rt.Stdout, rt.Stderr, rt.Env = os.Stdout, os.Stderr, os.Environ()
	if err := rt.Start(); err != nil {
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	fmt.Fprintf(os.Stderr, "kubelet-ns: node namespaces ready; %s started (pid %d in the node)\n", args[0], rt.Process.Pid)
	exited := make(chan syscall.WaitStatus, 1)
	go reap(rt.Process.Pid, exited)
	select {
	case st := <-exited:
		return fmt.Errorf("%s exited: %s", args[0], describe(st))
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "kubelet-ns: %v: stopping %s\n", sig, args[0])
		_ = rt.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			fmt.Fprintf(os.Stderr, "kubelet-ns: %s still running after %s; the namespace ends with it\n", args[0], stopGrace)
		}
		return nil
	}
}

// reap waits for every child of the namespace's init and reports the runtime's end.
func reap(runtime int, exited chan<- syscall.WaitStatus) {
	for {
		var st syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &st, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond) // no child right now (ECHILD)
			continue
		}
		if pid == runtime {
			exited <- st
		}
	}
}

func describe(st syscall.WaitStatus) string {
	if st.Signaled() {
		return "signal " + st.Signal().String()
	}
	return fmt.Sprintf("exit status %d", st.ExitStatus())
}
