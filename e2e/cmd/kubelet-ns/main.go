// Command kubelet-ns starts a kubelet in a private mount namespace of its own, so that
// several kubelets share one machine without touching the host:
//
//   - /var/lib and /var/log are fresh tmpfs (the kubelet writes its legacy container log
//     links to /var/log/containers whatever its configuration says), and --device-plugins
//     is bind-mounted at /var/lib/kubelet/device-plugins (the kubelet's device manager
//     ignores any configured path for its registration socket and checkpoint);
//   - each kernel tunable the kubelet sets at start-up (vm.overcommit_memory, kernel.panic,
//     ...) is a bind-mounted file under --sysctl-dir holding the host's value, so the
//     kubelet's writes land there and not in the host's kernel;
//   - with --numa-nodes=N (N > 1), /sys/devices/system/node shows N NUMA nodes that split
//     the host's CPUs and memory between them (numa.go), so the kubelet's Topology Manager
//     sees a multi-node machine on a one-node host.
//
// Then it executes the kubelet with the remaining arguments. It needs root.
//
// A real-runtime node (a kubelet on containerd and runc) is one mount and one PID namespace
// shared by its container runtime and its kubelet (node.go): --node-init, started by the
// harness as the first process of fresh mount and PID namespaces, makes the mounts above
// and a tmpfs on /run, runs the runtime (the remaining arguments) and reaps orphans as the
// namespace's init; --join=PID, the first argument, starts a kubelet inside the namespaces
// of that init (join.c), so that the kubelet can be killed and restarted while the runtime
// and the containers stay.
//
// Usage:
//
//	kubelet-ns --device-plugins=DIR --sysctl-dir=DIR [--numa-nodes=N --numa-dir=DIR] -- KUBELET [ARGS...]
//	kubelet-ns --node-init --device-plugins=DIR --sysctl-dir=DIR -- RUNTIME [ARGS...]
//	kubelet-ns --join=PID -- KUBELET [ARGS...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// tunables are the /proc/sys entries the kubelet's container manager sets
// (setupKernelTunables in pkg/kubelet/cm).
func tunables() []string {
	return []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}
}

// The namespace belongs to the thread that unshares it: main runs locked to the main
// thread, and exec replaces the whole process from there.
func init() { runtime.LockOSThread() }

func main() {
	plugins := flag.String("device-plugins", "", "host directory to show at /var/lib/kubelet/device-plugins")
	sysctlDir := flag.String("sysctl-dir", "", "host directory for the files that stand in for kernel tunables")
	numaNodes := flag.Int("numa-nodes", 0, "NUMA nodes the kubelet sees (0: the host's)")
	numaDir := flag.String("numa-dir", "", "host directory for the stand-in of /sys/devices/system/node")
	nodeInit := flag.Bool("node-init", false, "be the init of a real-runtime node's namespaces and run its runtime")
	join := flag.String("join", "", "the init of a real-runtime node whose namespaces to run the kubelet in (first argument)")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || *join == "" && (*plugins == "" || *sysctlDir == "") {
		fmt.Fprintln(os.Stderr, "usage: kubelet-ns [--node-init] --device-plugins=DIR --sysctl-dir=DIR -- PROGRAM [ARGS...]\n"+
			"       kubelet-ns --join=PID -- KUBELET [ARGS...]")
		os.Exit(2)
	}
	switch {
	case *join != "":
		// join.c has moved this process into the node's namespaces already.
	case *nodeInit:
		if err := runNode(*plugins, *sysctlDir, args); err != nil {
			fmt.Fprintln(os.Stderr, "kubelet-ns:", err)
			os.Exit(1)
		}
		return
	default:
		if err := enter(*plugins, *sysctlDir); err != nil {
			fmt.Fprintln(os.Stderr, "kubelet-ns:", err)
			os.Exit(1)
		}
		if *numaNodes > 1 {
			if err := fakeNUMA(*numaDir, *numaNodes); err != nil {
				fmt.Fprintln(os.Stderr, "kubelet-ns:", err)
				os.Exit(1)
			}
		}
	}
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintf(os.Stderr, "kubelet-ns: exec %s: %v\n", args[0], err)
	os.Exit(1)
}

// enter unshares the mount namespace and sets up the mounts.
func enter(plugins, sysctlDir string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: a kubelet runs in a private mount namespace with bind mounts")
	}
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	// Without this, mounts below would propagate back to the host's shared mounts.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	return kubeletMounts(plugins, sysctlDir)
}

// kubeletMounts makes the kubelet's mounts in a private mount namespace: tmpfs on
// /var/lib and /var/log, the device plugin directory, the kernel tunables.
func kubeletMounts(plugins, sysctlDir string) error {
	for _, dir := range []string{"/var/lib", "/var/log"} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", dir, err)
		}
	}
	target := "/var/lib/kubelet/device-plugins"
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := bind(plugins, target); err != nil {
		return err
	}
	if err := os.MkdirAll(sysctlDir, 0o755); err != nil {
		return err
	}
	for _, t := range tunables() {
		proc := filepath.Join("/proc/sys", t)
		cur, err := os.ReadFile(proc)
		if errors.Is(err, os.ErrNotExist) {
			continue // an older kernel; the kubelet only warns
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", proc, err)
		}
		file := filepath.Join(sysctlDir, strings.ReplaceAll(t, "/", "."))
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(file, cur, 0o644); err != nil {
				return err
			}
		}
		if err := bind(file, proc); err != nil {
			return err
		}
	}
	return nil
}

func bind(src, dst string) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	return nil
}
