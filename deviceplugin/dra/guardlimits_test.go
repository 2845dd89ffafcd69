package dra

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
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
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/memguard"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30

	podTenant    = types.UID("0a000000-0000-4000-8000-00000000000a")
	podNeighbour = types.UID("0b000000-0000-4000-8000-00000000000b")
	podDP        = types.UID("0c000000-0000-4000-8000-00000000000c")
)

// claimPod is a pod whose one container references the claims named, directly.
func claimPod(uid types.UID, name string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: uid},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main"}}}}
	for i, c := range claims {
		entry := "gpu-" + strconv.Itoa(i)
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: entry, ResourceClaimName: ptr.To(c)})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: entry})
	}
	return p
}

func preparedOn(ns, name string, shares ...Share) PreparedClaim {
	c := PreparedClaim{Namespace: ns, Name: name}
	for _, s := range shares {
		c.Devices = append(c.Devices, PreparedDevice{Share: s, CDIDeviceIDs: []string{"x.io/y=z"}})
	}
	return c
}

func TestClaimPodLimits(t *testing.T) {
	share := func(device, uuid string, mem int64) Share {
		return Share{Request: "gpu", Pool: "node-a", Device: device, UUID: uuid, MemoryMiB: mem}
	}
	prepared := map[string]PreparedClaim{
		"uid-1": preparedOn("team-a", "small", share("card-0", "GPU-0", 4096)),
		"uid-2": preparedOn("team-a", "pair", share("card-0", "GPU-0", 1024), share("card-1", "GPU-1", 2048)),
		"uid-3": preparedOn("team-b", "small", share("card-1", "GPU-1", 8192)),
		"uid-4": preparedOn("team-a", "from-template-xk2p9", share("card-2", "GPU-2", 512)),
	}
	// Two containers reference the same claim; an init container references another.
	shared := claimPod("pod-shared", "shared", "small")
	shared.Spec.Containers = append(shared.Spec.Containers, corev1.Container{Name: "side",
		Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu-0", Request: "gpu"}}}})
	shared.Spec.ResourceClaims = append(shared.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "init", ResourceClaimName: ptr.To("pair")})
	shared.Spec.InitContainers = []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "init"}}}}}
	// A claim made from a template, as the pod's status names it.
	templ := claimPod("pod-templ", "templ")
	templ.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("share-4g")},
		{Name: "pending", ResourceClaimTemplateName: ptr.To("share-4g")}}
	templ.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}, {Name: "pending"}}
	templ.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("from-template-xk2p9")},
		{Name: "pending"}}
	// A pod entry no container references gives nothing; nor does a claim not prepared here.
	unused := claimPod("pod-unused", "unused")
	unused.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("small")}}
	pods := []*corev1.Pod{shared, templ, unused, claimPod("pod-elsewhere", "elsewhere", "not-prepared-here"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "dp", UID: "pod-dp"}}}

	got := ClaimPodLimits(prepared, pods)
	want := map[types.UID]memguard.PodLimits{
		// small once (two containers share its region), pair once; team-b's "small" is another claim.
		"pod-shared": {Namespace: "team-a", Name: "shared", Cards: map[string]uint64{"GPU-0": 5120 * mib, "GPU-1": 2048 * mib}},
		"pod-templ":  {Namespace: "team-a", Name: "templ", Cards: map[string]uint64{"GPU-2": 512 * mib}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ClaimPodLimits =\n%+v\nwant\n%+v", got, want)
	}

	// A claim made again under the same name while the first is still prepared: both count.
	prepared["uid-5"] = preparedOn("team-a", "small", share("card-3", "GPU-3", 1024))
	if got := ClaimPodLimits(prepared, []*corev1.Pod{claimPod("p", "p", "small")}); got["p"].Cards["GPU-0"] != 4096*mib || got["p"].Cards["GPU-3"] != 1024*mib {
		t.Errorf("two prepared claims of one name: %+v, want both", got["p"].Cards)
	}
}

// host is a fake host for the guard: real processes (sleep) whose cgroups are written
// into a procfs of the test's own, where the kubelet would have put them.
type host struct {
	t    *testing.T
	root string
}

type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (h *host) start(pod types.UID) *child {
	c := &child{cmd: exec.Command("sleep", "300"), done: make(chan struct{})}
	if err := c.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	h.t.Cleanup(func() { _ = c.cmd.Process.Kill(); <-c.done })
	dir := filepath.Join(h.root, strconv.Itoa(c.cmd.Process.Pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	cg := "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(string(pod), "-", "_") +
		".slice/cri-containerd-1.scope\n"
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cg), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (c *child) uses(bytes uint64) nvml.ProcessInfo {
	return nvml.ProcessInfo{Pid: uint32(c.cmd.Process.Pid), UsedGpuMemory: bytes}
}

// exited reports whether c ended, by any means, within the time.
func (c *child) exited(within time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(within):
		return false
	}
}

// killed reports whether c ended by SIGKILL within the time.
func (c *child) killed(within time.Duration) bool {
	select {
	case <-c.done:
		var ee *exec.ExitError
		if errors.As(c.err, &ee) {
			ws, ok := ee.Sys().(syscall.WaitStatus)
			return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		return false
	case <-time.After(within):
		return false
	}
}

type events struct {
	mu   sync.Mutex
	pods []types.UID
	msgs []string
}

func (e *events) Report(_ context.Context, _, _ string, uid types.UID, _, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods = append(e.pods, uid)
	e.msgs = append(e.msgs, message)
}

// claimGuard is a node with two cards (a fake NVML machine), the driver's real preparer
// and a memory guard in enforce mode over the claims it prepared and pods.
type claimGuard struct {
	machine *nvmlfake.Machine
	prep    *Preparer
	guard   *memguard.Guard
	events  *events
	reg     *prometheus.Registry
	host    *host
}

func newClaimGuard(t *testing.T, pods ...*corev1.Pod) *claimGuard {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the memory guard stops processes through pidfds, on Linux only")
	}
	m := nvmlfake.Cards(2)
	cards := staticCards{{UUID: m.UUID(0), Index: 0, Model: "NVIDIA A30", MemoryMiB: 24576, Healthy: true},
		{UUID: m.UUID(1), Index: 1, Model: "NVIDIA A30", MemoryMiB: 24576, Healthy: true}}
	dir := t.TempDir()
	prep, err := NewPreparer(PrepareConfig{StateDir: filepath.Join(dir, "dra"), CDISpecDir: filepath.Join(dir, "cdi"), CardKind: "nvidia.com/gpu",
		Pool: "node-a", Container: hookenv.Container{HookLibrary: "/usr/lib/libvgpu.so", PreloadHostFile: filepath.Join(dir, "preload")}},
		cards, nil)
	if err != nil {
		t.Fatal(err)
	}
	devices := map[string]nvml.Device{}
	for i, d := range m.Devices {
		devices[m.UUID(i)] = d
	}
	cg := &claimGuard{machine: m, prep: prep, events: &events{}, reg: prometheus.NewRegistry(), host: &host{t: t, root: t.TempDir()}}
	cg.guard = memguard.New(memguard.Options{Mode: memguard.ModeEnforce, Interval: time.Second, OverChecks: 2, ProcRoot: cg.host.root,
		Policy: memguard.Policy{ContextAllowance: 512 * mib, CountedProcesses: 2}}, devices,
		GuardLimits(prep, func() ([]*corev1.Pod, error) { return pods, nil }),
		memguard.PidfdKiller{ProcRoot: cg.host.root}, cg.events, memguard.NewMetrics(cg.reg, "node-a"))
	return cg
}

// prepare prepares a claim of mem on card-0 through the preparer, as the kubelet asks.
func (cg *claimGuard) prepare(t *testing.T, uid, name, mem string) {
	t.Helper()
	c := claimWith(result("card-0", consumedOf(mem, "20")))
	c.Name, c.UID = name, types.UID(uid)
	res, err := cg.prep.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare %s: %v %v", name, err, res[c.UID].Err)
	}
}

func (cg *claimGuard) check(n int) {
	for i := 0; i < n; i++ {
		cg.guard.Check(context.Background())
	}
}

// The guard on a DRA node: a pod's process holding 9 GiB of card-0 where its claim holds
// 4 GiB (it escaped vgpu-core, or never loaded it) is killed after two checks over, with
// an event on the pod naming the claim's limit; the neighbour whose claim of 2 GiB it
// stays within keeps running; a pod with no claim prepared here (a device-plugin pod left
// on the node) is unmanaged: counted, never stopped.
func TestGuardStopsAProcessOverItsClaim(t *testing.T) {
	pods := []*corev1.Pod{claimPod(podTenant, "tenant", "tenant-gpu"), claimPod(podNeighbour, "neighbour", "neighbour-gpu"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "dp", UID: podDP}}}
	cg := newClaimGuard(t, pods...)
	cg.prepare(t, "3f0c1e9a-0000-4000-8000-0000000000a1", "tenant-gpu", "4Gi")
	cg.prepare(t, "3f0c1e9a-0000-4000-8000-0000000000a2", "neighbour-gpu", "2Gi")
	tenant, neighbour, dp := cg.host.start(podTenant), cg.host.start(podNeighbour), cg.host.start(podDP)
	cg.machine.SetProcesses(0, []nvml.ProcessInfo{tenant.uses(9 * gib), neighbour.uses(2*gib + 400*mib), dp.uses(6 * gib)})

	cg.check(1)
	if tenant.killed(200 * time.Millisecond) {
		t.Fatal("killed after one check over; the guard waits for two")
	}
	cg.check(1)
	if !tenant.killed(5 * time.Second) {
		t.Fatal("the process over its claim's memory was not killed")
	}
	for name, c := range map[string]*child{"neighbour within its claim": neighbour, "device-plugin pod": dp} {
		if c.exited(100 * time.Millisecond) {
			t.Fatalf("the %s was stopped", name)
		}
	}
	if len(cg.events.pods) != 1 || cg.events.pods[0] != podTenant || !strings.Contains(cg.events.msgs[0], "9216 MiB") ||
		!strings.Contains(cg.events.msgs[0], "its limit there is 4096 MiB") {
		t.Errorf("events %v %q, want one on the tenant naming 9216 MiB and its limit of 4096 MiB", cg.events.pods, cg.events.msgs)
	}
	want := `
# HELP tessera_card_unmanaged_memory_bytes Device memory held on the card by processes outside every pod the agent set up (host processes, another device plugin's pods), at the memory guard's last check.
# TYPE tessera_card_unmanaged_memory_bytes gauge
tessera_card_unmanaged_memory_bytes{node="node-a",uuid="` + cg.machine.UUID(0) + `"} 6.442450944e+09
`
	if err := testutil.GatherAndCompare(cg.reg, strings.NewReader(want), "tessera_card_unmanaged_memory_bytes"); err != nil {
		t.Errorf("the device-plugin pod's 6 GiB as unmanaged: %v", err)
	}
}

// A claim unprepared while the guard runs is forgotten: its pod, over the claim's memory
// for one check, is no longer judged against it (its memory is unmanaged from then on),
// and the count of checks over starts again should the claim be prepared once more.
func TestGuardForgetsAnUnpreparedClaim(t *testing.T) {
	cg := newClaimGuard(t, claimPod(podTenant, "tenant", "tenant-gpu"))
	const uid = "3f0c1e9a-0000-4000-8000-0000000000b1"
	cg.prepare(t, uid, "tenant-gpu", "4Gi")
	tenant := cg.host.start(podTenant)
	cg.machine.SetProcesses(0, []nvml.ProcessInfo{tenant.uses(9 * gib)})

	cg.check(1) // over once
	res, err := cg.prep.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "tenant-gpu"}, UID: uid}})
	if err != nil || res[uid] != nil {
		t.Fatalf("unprepare: %v %v", err, res[uid])
	}
	cg.check(3)
	if tenant.exited(200 * time.Millisecond) {
		t.Fatal("a pod whose claim was unprepared was stopped against the claim's limit")
	}
	if n, err := testutil.GatherAndCount(cg.reg, "tessera_card_unmanaged_memory_bytes"); err != nil || n != 1 {
		t.Errorf("unmanaged series %d (%v), want the pod's card", n, err)
	}
	// Prepared again: two new checks over before anything is stopped.
	cg.prepare(t, uid, "tenant-gpu", "4Gi")
	cg.check(1)
	if tenant.exited(200 * time.Millisecond) {
		t.Fatal("killed on the first check after the claim came back; the count of checks over did not start again")
	}
	cg.check(1)
	if !tenant.killed(5 * time.Second) {
		t.Fatal("the process over the claim prepared again was not killed")
	}
}
