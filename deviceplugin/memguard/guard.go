// Package memguard holds every container to its memory limit from the node's side. vgpu-core
// enforces limits inside the container, where a tenant can undo it: rewrite the shared
// region's counters, or run code the hook library never sees (a static binary, its own copy
// of the driver's entry points). The guard needs none of that: every few seconds it asks
// NVML which processes hold memory on each card and how much, finds each process's pod
// from its cgroup (the kernel's, not the container's word), and compares each pod's total
// on each card with the limits the agent itself set up for it. A pod over its limit for
// OverChecks checks in a row is reported on the pod (an event) and, in enforce mode, its
// largest processes on that card are killed until it is back within its limit.
//
// It needs the host's processes (the agent in the host's pid namespace): NVML names
// processes as the caller's namespace sees them, and the cgroups are read from /proc.
// Without them it stays off and says so.
package memguard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Modes.
const (
	ModeOff     = "off"
	ModeReport  = "report"
	ModeEnforce = "enforce"
)

// PodLimits are a managed pod's memory limits, in bytes, per card UUID.
type PodLimits struct {
	Namespace, Name string
	Cards           map[string]uint64
}

// Limits returns the pods the agent set up on this node (pods that still exist) with
// their limits: on a device-plugin node from the records written at Allocate, on a DRA
// node from the claims the driver prepared (dra.GuardLimits). It is called at every
// check, so a pod or claim gone since the last one is forgotten.
type Limits func() (map[types.UID]PodLimits, error)

// Killer stops a process of a pod; it must not signal a process that is no longer in
// that pod (the pid was reused).
type Killer interface {
	Kill(pid int, pod types.UID) error
}

// Reporter tells a pod's owner what the guard did (a Kubernetes event on the pod).
type Reporter interface {
	Report(ctx context.Context, namespace, name string, uid types.UID, reason, message string)
}

// Options configure a Guard.
type Options struct {
	Mode       string
	Interval   time.Duration
	OverChecks int
	Policy     Policy
	// ProcRoot is the host's procfs (default /proc).
	ProcRoot string
}

// Guard checks the node's cards on a timer. Its state (how many checks in a row each pod
// has been over on each card) is owned by the Run goroutine.
type Guard struct {
	opts     Options
	devices  map[string]nvml.Device
	limits   Limits
	killer   Killer
	reporter Reporter
	metrics  *Metrics
	over     map[Key]int
	reported map[Key]bool
	warned   map[string]bool
}

// New returns a guard over the cards (UUID to NVML handle).
func New(opts Options, devices map[string]nvml.Device, limits Limits, killer Killer, reporter Reporter, m *Metrics) *Guard {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.OverChecks < 1 {
		opts.OverChecks = 1
	}
	return &Guard{opts: opts, devices: devices, limits: limits, killer: killer, reporter: reporter, metrics: m,
		over: map[Key]int{}, reported: map[Key]bool{}, warned: map[string]bool{}}
}

// Run checks every Interval until ctx ends.
func (g *Guard) Run(ctx context.Context) {
	klog.InfoS("Memory guard running", "mode", g.opts.Mode, "interval", g.opts.Interval, "overChecks", g.opts.OverChecks,
		"contextAllowance", g.opts.Policy.ContextAllowance, "countedProcesses", g.opts.Policy.CountedProcesses)
	g.metrics.setActive(true)
	defer g.metrics.setActive(false)
	t := time.NewTicker(g.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.Check(ctx)
		}
	}
}

// Check runs one check: list, judge, act.
func (g *Guard) Check(ctx context.Context) {
	limits, err := g.limits()
	if err != nil {
		klog.ErrorS(err, "Memory guard: cannot read the containers' limits; skipping this check")
		return
	}
	caps := make(map[types.UID]map[string]uint64, len(limits))
	for uid, pl := range limits {
		caps[uid] = pl.Cards
	}
	j := Judge(g.sample(), caps, g.opts.Policy)
	g.metrics.setUnmanaged(j.Unmanaged)
	seen := map[Key]bool{}
	for _, e := range j.Excesses {
		seen[e.Key] = true
		g.over[e.Key]++
		if g.over[e.Key] < g.opts.OverChecks {
			continue
		}
		g.act(ctx, e, limits[e.Pod])
	}
	for k := range g.over {
		if !seen[k] {
			delete(g.over, k)
			delete(g.reported, k)
		}
	}
}

// sample lists the processes of every card, in UUID order.
func (g *Guard) sample() []Card {
	uuids := make([]string, 0, len(g.devices))
	for u := range g.devices {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	cards := make([]Card, 0, len(uuids))
	for _, u := range uuids {
		procs, err := listProcesses(g.devices[u])
		if err != nil {
			if !g.warned[u] {
				klog.ErrorS(err, "Memory guard: cannot list the card's processes; the card goes unchecked", "uuid", u)
				g.warned[u] = true
			}
			g.metrics.checkFailed()
			continue
		}
		delete(g.warned, u)
		c := Card{UUID: u}
		for _, p := range procs {
			pr := Process{PID: int(p.Pid), UsedBytes: p.UsedGpuMemory}
			if uid, err := podOfPID(g.opts.ProcRoot, pr.PID); err == nil {
				pr.Pod = uid
			} else if !errors.Is(err, errNotInPod) && !errors.Is(err, os.ErrNotExist) {
				klog.V(2).InfoS("Memory guard: cannot read a process's cgroup", "pid", pr.PID, "err", err)
			}
			c.Processes = append(c.Processes, pr)
		}
		cards = append(cards, c)
	}
	return cards
}

// listProcesses merges NVML's compute and graphics lists (a process with both kinds of
// context is in both, with the same memory): Vulkan or OpenGL memory counts as much as
// CUDA's.
func listProcesses(d nvml.Device) ([]nvml.ProcessInfo, error) {
	compute, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GetComputeRunningProcesses: %v", ret)
	}
	graphics, ret := d.GetGraphicsRunningProcesses()
	if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("GetGraphicsRunningProcesses: %v", ret)
	}
	byPID := make(map[uint32]nvml.ProcessInfo, len(compute)+len(graphics))
	for _, list := range [][]nvml.ProcessInfo{compute, graphics} {
		for _, p := range list {
			if old, ok := byPID[p.Pid]; !ok || knownAbove(p.UsedGpuMemory, old.UsedGpuMemory) {
				byPID[p.Pid] = p
			}
		}
	}
	out := make([]nvml.ProcessInfo, 0, len(byPID))
	for _, p := range byPID {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out, nil
}

// knownAbove prefers a known figure to NotAvailable, then the larger.
func knownAbove(a, b uint64) bool {
	if b == NotAvailable {
		return a != NotAvailable
	}
	return a != NotAvailable && a > b
}

func (g *Guard) act(ctx context.Context, e Excess, pod PodLimits) {
	summary := fmt.Sprintf("holds %d MiB on card %s in %d process(es); its limit there is %d MiB (%d MiB with the context allowance)",
		e.Used>>20, e.Card, e.Processes, e.Limit>>20, e.Allowed>>20)
	if e.Limit == 0 {
		summary = fmt.Sprintf("holds %d MiB on card %s in %d process(es), a card it was not given", e.Used>>20, e.Card, e.Processes)
	}
	if g.opts.Mode != ModeEnforce {
		if g.reported[e.Key] {
			return
		}
		g.reported[e.Key] = true
		g.metrics.action(ActionReported)
		klog.InfoS("Memory guard: pod over its memory limit (report mode: nothing stopped)", "pod", klog.KRef(pod.Namespace, pod.Name),
			"uid", e.Pod, "uuid", e.Card, "usedMiB", e.Used>>20, "limitMiB", e.Limit>>20, "allowedMiB", e.Allowed>>20)
		g.reporter.Report(ctx, pod.Namespace, pod.Name, e.Pod, ReasonOverLimit, "The pod "+summary+". The node agent's memory guard is in report mode: nothing was stopped.")
		return
	}
	var killed, failed []string
	for _, v := range e.Victims {
		if err := g.killer.Kill(v.PID, e.Pod); err != nil {
			failed = append(failed, fmt.Sprintf("%d (%v)", v.PID, err))
			g.metrics.action(ActionKillFailed)
			klog.ErrorS(err, "Memory guard: cannot stop a process over its pod's limit", "pod", klog.KRef(pod.Namespace, pod.Name), "pid", v.PID)
			continue
		}
		killed = append(killed, fmt.Sprintf("%d (%d MiB)", v.PID, v.UsedBytes>>20))
		g.metrics.action(ActionKilled)
	}
	delete(g.over, e.Key)
	klog.InfoS("Memory guard: stopped processes of a pod over its memory limit", "pod", klog.KRef(pod.Namespace, pod.Name), "uid", e.Pod,
		"uuid", e.Card, "usedMiB", e.Used>>20, "limitMiB", e.Limit>>20, "allowedMiB", e.Allowed>>20, "killed", killed, "failed", failed)
	msg := "The pod " + summary + ", as NVML counts it."
	if len(killed) > 0 {
		msg += fmt.Sprintf(" Killed process(es) %v.", killed)
	}
	if len(failed) > 0 {
		msg += fmt.Sprintf(" Could not stop %v.", failed)
	}
	g.reporter.Report(ctx, pod.Namespace, pod.Name, e.Pod, ReasonOverLimit, msg)
}

// ReasonOverLimit is the reason of the guard's events.
const ReasonOverLimit = "GPUMemoryOverLimit"
