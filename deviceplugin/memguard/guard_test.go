package memguard

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// host is a fake host: real processes (sleep) whose cgroups are written into a procfs of
// our own, as the kubelet would have placed them.
type host struct {
	t    *testing.T
	root string
}

func newHost(t *testing.T) *host {
	if runtime.GOOS != "linux" {
		t.Skip("the memory guard stops processes through pidfds, on Linux only")
	}
	return &host{t: t, root: t.TempDir()}
}

// child is a real process of the test, waited for once, by its own goroutine.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// start runs a process in pod's cgroup and returns it; a nil pod leaves it outside pods.
func (h *host) start(pod types.UID) *child {
	c := &child{cmd: exec.Command("sleep", "300"), done: make(chan struct{})}
	if err := c.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	h.t.Cleanup(func() { _ = c.cmd.Process.Kill(); <-c.done })
	h.place(c.cmd.Process.Pid, pod)
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (h *host) place(pid int, pod types.UID) {
	dir := filepath.Join(h.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	cg := "0::/system.slice/sshd.service\n"
	if pod != "" {
		cg = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(string(pod), "-", "_") + ".slice/cri-containerd-1.scope\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cg), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// exited reports whether c ended within the time, and by which signal.
func exited(c *child, within time.Duration) (syscall.Signal, bool) {
	select {
	case <-c.done:
		var ee *exec.ExitError
		if errors.As(c.err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return ws.Signal(), true
			}
		}
		return 0, true
	case <-time.After(within):
		return 0, false
	}
}

type event struct {
	pod     types.UID
	reason  string
	message string
}

type reporter struct {
	mu     sync.Mutex
	events []event
}

func (r *reporter) Report(_ context.Context, _, _ string, uid types.UID, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{uid, reason, message})
}

func proc(c *child, bytes uint64) nvml.ProcessInfo {
	return nvml.ProcessInfo{Pid: uint32(c.pid()), UsedGpuMemory: bytes}
}

func guardOn(t *testing.T, h *host, machine *nvmlfake.Machine, mode string, limits map[types.UID]PodLimits) (*Guard, *reporter, *prometheus.Registry) {
	t.Helper()
	devices := map[string]nvml.Device{}
	for i, d := range machine.Devices {
		devices[machine.UUID(i)] = d
	}
	rep := &reporter{}
	reg := prometheus.NewRegistry()
	g := New(Options{Mode: mode, Interval: time.Second, OverChecks: 2, ProcRoot: h.root,
		Policy: Policy{ContextAllowance: 512 * mib, CountedProcesses: 2}},
		devices, func() (map[types.UID]PodLimits, error) { return limits, nil }, PidfdKiller{ProcRoot: h.root}, rep, NewMetrics(reg, "node-a"))
	return g, rep, reg
}

// TestGuardStopsAContainerThatEscapedItsHookLibrary is the attack: a tenant's process
// holds 9 GiB of a card where its pod's limit is 4 GiB — it zeroed the counters of its
// shared region, or never loaded vgpu-core at all; the guard reads neither. NVML's
// accounting and the process's cgroup are all the guard trusts: the process is killed
// (after two checks over), its neighbour on the same card, within its limit, keeps
// running, and the tenant's pod gets an event naming the process and the numbers.
func TestGuardStopsAContainerThatEscapedItsHookLibrary(t *testing.T) {
	h := newHost(t)
	tenant, neighbour, host := h.start(podA), h.start(podB), h.start("")
	m := nvmlfake.Cards(2)
	m.SetProcesses(0, []nvml.ProcessInfo{proc(tenant, 9*gib), proc(neighbour, 2*gib), proc(host, 1*gib)})
	limits := map[types.UID]PodLimits{
		podA: {Namespace: "tenant-a", Name: "escape", Cards: map[string]uint64{m.UUID(0): 4 * gib}},
		podB: {Namespace: "tenant-b", Name: "victim", Cards: map[string]uint64{m.UUID(0): 2 * gib}},
	}
	g, rep, reg := guardOn(t, h, m, ModeEnforce, limits)

	g.Check(context.Background())
	if _, done := exited(tenant, 200*time.Millisecond); done {
		t.Fatal("killed after one check over; the guard waits for two")
	}
	g.Check(context.Background())
	sig, done := exited(tenant, 5*time.Second)
	if !done || sig != syscall.SIGKILL {
		t.Fatalf("the tenant's process was not killed (done %v, signal %v)", done, sig)
	}
	for name, c := range map[string]*child{"neighbour": neighbour, "host process": host} {
		if _, done := exited(c, 100*time.Millisecond); done {
			t.Fatalf("the %s was stopped", name)
		}
	}
	if got := testutil.ToFloat64(g.metrics.actions.WithLabelValues(ActionKilled)); got != 1 {
		t.Errorf("killed counter %v, want 1", got)
	}
	if len(rep.events) != 1 || rep.events[0].pod != podA || rep.events[0].reason != ReasonOverLimit ||
		!strings.Contains(rep.events[0].message, strconv.Itoa(tenant.pid())) || !strings.Contains(rep.events[0].message, "9216 MiB") ||
		!strings.Contains(rep.events[0].message, "4096 MiB") {
		t.Errorf("events %+v, want one on the tenant's pod naming the process, 9216 MiB and 4096 MiB", rep.events)
	}
	if n, err := testutil.GatherAndCount(reg, "tessera_card_unmanaged_memory_bytes"); err != nil || n != 1 {
		t.Errorf("unmanaged series %d (%v), want 1 (the host process's card)", n, err)
	}
}

// TestGuardReportModeStopsNothing: report mode tells the pod once while it stays over.
func TestGuardReportModeStopsNothing(t *testing.T) {
	h := newHost(t)
	tenant := h.start(podA)
	m := nvmlfake.Cards(1)
	m.SetProcesses(0, []nvml.ProcessInfo{proc(tenant, 9*gib)})
	g, rep, _ := guardOn(t, h, m, ModeReport, map[types.UID]PodLimits{podA: {Namespace: "a", Name: "p", Cards: map[string]uint64{m.UUID(0): 4 * gib}}})
	for i := 0; i < 5; i++ {
		g.Check(context.Background())
	}
	if _, done := exited(tenant, 200*time.Millisecond); done {
		t.Fatal("report mode stopped a process")
	}
	if len(rep.events) != 1 || !strings.Contains(rep.events[0].message, "report mode") {
		t.Fatalf("events %+v, want one saying report mode", rep.events)
	}
	// Back within, then over again: a new report.
	m.SetProcesses(0, []nvml.ProcessInfo{proc(tenant, 1*gib)})
	g.Check(context.Background())
	m.SetProcesses(0, []nvml.ProcessInfo{proc(tenant, 9*gib)})
	g.Check(context.Background())
	g.Check(context.Background())
	if len(rep.events) != 2 {
		t.Fatalf("%d events after going over a second time, want 2", len(rep.events))
	}
}

// TestGuardBriefExcessIsForgiven: over for one check and back (NVML's numbers during a
// free) is not acted on.
func TestGuardBriefExcessIsForgiven(t *testing.T) {
	h := newHost(t)
	tenant := h.start(podA)
	m := nvmlfake.Cards(1)
	g, rep, _ := guardOn(t, h, m, ModeEnforce, map[types.UID]PodLimits{podA: {Cards: map[string]uint64{m.UUID(0): 4 * gib}}})
	for i := 0; i < 4; i++ {
		used := uint64(1 * gib)
		if i%2 == 0 {
			used = 9 * gib
		}
		m.SetProcesses(0, []nvml.ProcessInfo{proc(tenant, used)})
		g.Check(context.Background())
	}
	if _, done := exited(tenant, 200*time.Millisecond); done || len(rep.events) != 0 {
		t.Fatalf("acted on alternating checks (exited %v, events %d)", done, len(rep.events))
	}
}

// TestKillerRefusesAReusedPID: the pid NVML listed now belongs to a process of another
// pod (the first exited and the number was reused): nothing is signalled.
func TestKillerRefusesAReusedPID(t *testing.T) {
	h := newHost(t)
	other := h.start(podB)
	err := PidfdKiller{ProcRoot: h.root}.Kill(other.pid(), podA)
	if !errors.Is(err, ErrNotThePod) {
		t.Fatalf("Kill of another pod's process: %v, want ErrNotThePod", err)
	}
	if _, done := exited(other, 200*time.Millisecond); done {
		t.Fatal("another pod's process was stopped")
	}
	if err := (PidfdKiller{ProcRoot: h.root}).Kill(1, podA); !errors.Is(err, ErrNotThePod) {
		t.Fatalf("Kill(1): %v, want ErrNotThePod", err)
	}
}

// TestGuardLostCardGoesUnchecked: a card NVML cannot list is counted and skipped; the
// others are still checked.
func TestGuardLostCardGoesUnchecked(t *testing.T) {
	h := newHost(t)
	tenant := h.start(podA)
	m := nvmlfake.Cards(2)
	m.SetLost(0, true)
	m.SetProcesses(1, []nvml.ProcessInfo{proc(tenant, 9*gib)})
	g, _, _ := guardOn(t, h, m, ModeEnforce, map[types.UID]PodLimits{podA: {Cards: map[string]uint64{m.UUID(1): 4 * gib}}})
	g.Check(context.Background())
	g.Check(context.Background())
	if sig, done := exited(tenant, 5*time.Second); !done || sig != syscall.SIGKILL {
		t.Fatal("the process over its limit on the healthy card was not stopped")
	}
	if got := testutil.ToFloat64(g.metrics.failures); got != 2 {
		t.Errorf("card errors %v, want 2", got)
	}
}
