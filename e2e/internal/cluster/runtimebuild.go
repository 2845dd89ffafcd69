package cluster

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"
)

// RuntimeBinaries are what a real-runtime node runs (runtime.go) and its workload.
type RuntimeBinaries struct {
	// Missing says why there are none ("" when built).
	Missing string
	// containerd v2.2 with its runc shim and ctr (which imports the harness's images), runc
	// v1.5, and the OCI runtime between them (tools/containerd/fakenvidiaruntime).
	Containerd, Shim, Ctr, Runc, NvidiaRuntime string
	// Pause is the sandboxes' pause program and the nodes' loopback CNI plugin.
	Pause string
	// HookLibrary is vgpu-core's libvgpu.so; StubDriver the directory of its stub driver
	// (libcuda.so.1, libnvidia-ml.so.1), which the fake toolkit mounts as the driver.
	HookLibrary, StubDriver string
	// Probe is the workload (e2e/images/vgpu-probe), a dynamically linked C program.
	Probe string
}

// haveSeccomp says whether libseccomp's headers are installed, which runc's seccomp
// support (the kubelet's RuntimeDefault profile) needs to build.
func haveSeccomp(ctx context.Context) bool {
	return exec.CommandContext(ctx, "pkg-config", "--exists", "libseccomp").Run() == nil
}

// buildWorkload builds vgpu-core's hook library and stub driver into the cache (make, in a
// build directory of the harness's own, so that it never races a `make test` in the same
// tree) and the probe against vgpu-core's ABI header. Both are incremental.
func buildWorkload(ctx context.Context, root, cacheDir string, progress io.Writer, rt *RuntimeBinaries) error {
	start := time.Now()
	build := filepath.Join(cacheDir, "vgpu-core")
	rt.HookLibrary, rt.StubDriver = filepath.Join(build, "libvgpu.so"), filepath.Join(build, "stub")
	mk := exec.CommandContext(ctx, "make", "-s", "-C", filepath.Join(root, "vgpu-core"), "BUILD="+build, rt.HookLibrary,
		filepath.Join(rt.StubDriver, "libcuda.so.1"), filepath.Join(rt.StubDriver, "libnvidia-ml.so.1"))
	if out, err := mk.CombinedOutput(); err != nil {
		return fmt.Errorf("build vgpu-core into %s: %w\n%s", build, err, out)
	}
	rt.Probe = filepath.Join(cacheDir, "vgpu-probe")
	gcc := exec.CommandContext(ctx, "gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror",
		"-I"+filepath.Join(root, "vgpu-core", "include"), "-o", rt.Probe,
		filepath.Join(root, "e2e", "images", "vgpu-probe", "probe.c"), "-ldl")
	if out, err := gcc.CombinedOutput(); err != nil {
		return fmt.Errorf("build vgpu-probe: %w\n%s", err, out)
	}
	fmt.Fprintf(progress, "  %-30s built in %s\n", "libvgpu.so, stub driver, vgpu-probe", time.Since(start).Round(time.Second))
	return nil
}
