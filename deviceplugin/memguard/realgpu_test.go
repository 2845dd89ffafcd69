//go:build realgpu && linux

// The memory guard on a real card: the real driver's NVML, real cgroups, real CUDA
// processes. It needs one NVIDIA GPU, root (it makes cgroups as the kubelet would) and the
// GPU test kit's binary, which holds device memory on request:
//
//	make -C vgpu-core build/gputest/gputest
//	TESSERA_GPUTEST=$PWD/vgpu-core/build/gputest/gputest go test -tags realgpu -run RealGPU -v ./deviceplugin/memguard
//
// The ordinary suite runs the same guard against go-nvml's mock (guard_test.go); this file
// is what shows that the driver's process list, its memory figures and the kernel's cgroup
// paths are what the guard expects.
package memguard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
)

// holder is a real CUDA process of the GPU test kit holding device memory until its stdin
// closes.
type holder struct {
	*child
	stdin io.WriteCloser
}

// startHolder runs `gputest worker mem BYTES`, moves it into cgroupDir (when set) and waits
// for its allocation to succeed.
func startHolder(t *testing.T, kit string, bytes uint64, cgroupDir string) *holder {
	t.Helper()
	cmd := exec.Command(kit, "worker", "mem", strconv.FormatUint(bytes, 10))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	c := &child{cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the GPU test kit %s: %v", kit, err)
	}
	h := &holder{child: c, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); <-c.done })
	if cgroupDir != "" {
		if err := os.WriteFile(filepath.Join(cgroupDir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move pid %d into %s: %v", cmd.Process.Pid, cgroupDir, err)
		}
	}
	select {
	case l := <-line:
		// "ok <total bytes> <CUresult of the allocation>"
		if f := strings.Fields(l); len(f) != 3 || f[0] != "ok" || f[2] != "0" {
			t.Fatalf("the holder of %d MiB answered %q, want \"ok <total> 0\"", bytes>>20, l)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the holder of %d MiB did not answer in 60 s", bytes>>20)
	}
	return h
}

// podCgroup makes the cgroup a kubelet with the systemd driver would give a container of
// pod uid, and removes it at the end.
func podCgroup(t *testing.T, uid types.UID) string {
	t.Helper()
	base := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err != nil {
		base = filepath.Join(base, "pids") // cgroup v1: any one hierarchy names the pod
	}
	pod := "kubepods-burstable-pod" + strings.ReplaceAll(string(uid), "-", "_") + ".slice"
	dirs := []string{
		filepath.Join(base, "kubepods.slice"),
		filepath.Join(base, "kubepods.slice", "kubepods-burstable.slice"),
		filepath.Join(base, "kubepods.slice", "kubepods-burstable.slice", pod),
		filepath.Join(base, "kubepods.slice", "kubepods-burstable.slice", pod, "cri-containerd-"+strings.Repeat("7e", 32)+".scope"),
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			t.Fatalf("make cgroup %s (the test needs root and a writable cgroup tree): %v", d, err)
		}
	}
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i]) // fails while in use (the shared parents of another pod): fine
		}
	})
	return dirs[len(dirs)-1]
}

// used waits until NVML lists every pid with a known figure and returns the figures.
func used(t *testing.T, d nvml.Device, pids ...int) map[int]uint64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		procs, err := listProcesses(d)
		if err != nil {
			t.Fatalf("list the card's processes: %v", err)
		}
		got := map[int]uint64{}
		for _, p := range procs {
			if p.UsedGpuMemory != NotAvailable {
				got[int(p.Pid)] = p.UsedGpuMemory
			}
		}
		all := true
		for _, pid := range pids {
			_, ok := got[pid]
			all = all && ok
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("NVML lists %v after 15 s, want pids %v with their memory", got, pids)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRealGPUGuardStopsAPodOverItsLimit: three real CUDA processes on one card: a tenant
// pod holding 3 GiB against a 1 GiB limit, a neighbour pod within its limit, and a host
// process outside every pod. After two checks the tenant's process is killed; the others
// live; the tenant's pod gets the event; the host process is counted as unmanaged memory.
func TestRealGPUGuardStopsAPodOverItsLimit(t *testing.T) {
	kit := os.Getenv("TESSERA_GPUTEST")
	if kit == "" {
		t.Fatal("TESSERA_GPUTEST must name the GPU test kit's binary (vgpu-core/build/gputest/gputest)")
	}
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		t.Fatalf("NVML init on the real driver: %v", ret)
	}
	defer nvml.Shutdown()
	dev, ret := nvml.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("device 0: %v", ret)
	}
	uuid, _ := dev.GetUUID()
	name, _ := dev.GetName()
	driver, _ := nvml.SystemGetDriverVersion()
	t.Logf("card 0: %s %s, driver %s", name, uuid, driver)

	podTenant, podNeighbour := types.UID("5e0a1c2d-0000-4000-8000-00000000000a"), types.UID("5e0a1c2d-0000-4000-8000-00000000000b")
	tenant := startHolder(t, kit, 3*gib, podCgroup(t, podTenant))
	neighbour := startHolder(t, kit, 512*mib, podCgroup(t, podNeighbour))
	hostProc := startHolder(t, kit, 1*gib, "")

	// What the driver counts for each: the allocation plus the process's context.
	figures := used(t, dev, tenant.pid(), neighbour.pid(), hostProc.pid())
	for _, p := range []struct {
		what  string
		pid   int
		alloc uint64
	}{{"tenant", tenant.pid(), 3 * gib}, {"neighbour", neighbour.pid(), 512 * mib}, {"host", hostProc.pid(), 1 * gib}} {
		u := figures[p.pid]
		t.Logf("NVML: %-9s pid %d holds %d MiB for an allocation of %d MiB: context footprint %d MiB",
			p.what, p.pid, u>>20, p.alloc>>20, (int64(u)-int64(p.alloc))>>20)
		if u < p.alloc {
			t.Errorf("NVML counts %d MiB for the %s, below its %d MiB allocation", u>>20, p.what, p.alloc>>20)
		}
	}
	for pid, want := range map[int]types.UID{tenant.pid(): podTenant, neighbour.pid(): podNeighbour} {
		if got, err := podOfPID("/proc", pid); err != nil || got != want {
			t.Fatalf("pod of pid %d from its real cgroup: %q (%v), want %q", pid, got, err, want)
		}
	}

	limits := map[types.UID]PodLimits{
		podTenant:    {Namespace: "tenant-a", Name: "escape", Cards: map[string]uint64{uuid: 1 * gib}},
		podNeighbour: {Namespace: "tenant-b", Name: "victim", Cards: map[string]uint64{uuid: 2 * gib}},
	}
	rep := &reporter{}
	reg := prometheus.NewRegistry()
	g := New(Options{Mode: ModeEnforce, Interval: time.Second, OverChecks: 2,
		Policy: Policy{ContextAllowance: 768 * mib, CountedProcesses: 4}},
		map[string]nvml.Device{uuid: dev}, func() (map[types.UID]PodLimits, error) { return limits, nil },
		PidfdKiller{}, rep, NewMetrics(reg, "gpu-node"))

	g.Check(context.Background())
	if _, done := exited(tenant.child, 300*time.Millisecond); done {
		t.Fatal("killed after one check over; the guard waits for two")
	}
	g.Check(context.Background())
	sig, done := exited(tenant.child, 10*time.Second)
	if !done || sig != syscall.SIGKILL {
		t.Fatalf("the tenant's process was not killed (done %v, signal %v)", done, sig)
	}
	for what, c := range map[string]*child{"neighbour": neighbour.child, "host process": hostProc.child} {
		if _, done := exited(c, 200*time.Millisecond); done {
			t.Fatalf("the %s was stopped", what)
		}
	}
	if len(rep.events) != 1 || rep.events[0].pod != podTenant || rep.events[0].reason != ReasonOverLimit {
		t.Errorf("events %+v, want one %s on the tenant's pod", rep.events, ReasonOverLimit)
	} else {
		t.Logf("event on the tenant's pod: %s", rep.events[0].message)
	}
	if got := testutil.ToFloat64(g.metrics.unmanaged.WithLabelValues(uuid)); got < float64(1*gib) {
		t.Errorf("unmanaged memory on the card %v bytes, want at least the host process's 1 GiB", got)
	}

	// The card gives the memory back: the tenant's figure leaves NVML's list.
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, _ := listProcesses(dev)
		gone := true
		for _, p := range procs {
			gone = gone && int(p.Pid) != tenant.pid()
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed process is still on NVML's list after 10 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "realgpu: the guard killed the tenant's process on the real card; neighbour and host process live")
}
