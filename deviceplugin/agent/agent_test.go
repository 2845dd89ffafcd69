package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// agentOnFakeKubelet starts a fake kubelet (stopped with the test) and loads the
// agent's configuration for node-a against it, with extra flags.
func agentOnFakeKubelet(t *testing.T, extra ...string) (*kubeletsim.Kubelet, *config.Config) {
	t.Helper()
	sock, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	k, err := kubeletsim.Start(kubeletsim.Options{PluginDir: sock, Resource: api.ResourceNumber})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	state := t.TempDir()
	args := append([]string{"--node-name=node-a", "--device-plugin-dir=" + sock, "--pod-resources-socket=" + k.PodResourcesSocket(),
		"--state-dir=" + state, "--hook-library=" + filepath.Join(state, "libvgpu.so"), "--heartbeat-interval=1h",
		"--cdi-spec-dir=" + filepath.Join(state, "cdi"), "--kubelet-pods-dir=" + filepath.Join(state, "kubelet-pods")}, extra...)
	cfg, err := config.Load(args, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return k, cfg
}

func TestTheAgentPublishesRegistersHandsOffAndServesMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, cfg := agentOnFakeKubelet(t, "--shares-per-card=4")
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	machine := nvmlfake.FourCardsTwoNUMA()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{NVML: machine, Client: client, MetricsListener: lis}) }()

	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	if n := len(k.Health()); n != 16 {
		t.Errorf("kubelet sees %d slots, want 16", n)
	}
	var node *corev1.Node
	for node == nil || node.Annotations[api.AnnotationInventory] == "" {
		if ctx.Err() != nil {
			t.Fatal("inventory never published")
		}
		node, _ = client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		time.Sleep(10 * time.Millisecond)
	}
	inv, err := api.DecodeInventory(node.Annotations[api.AnnotationInventory])
	if err != nil || len(inv.Cards) != 4 || inv.Links[0][1] != "NV4" {
		t.Fatalf("inventory %+v, %v", inv, err)
	}
	reserves, err := api.DecodeContextReserve(node.Annotations[api.AnnotationContextReserve])
	if err != nil || len(reserves.Cards) != len(inv.Cards) {
		t.Fatalf("context reserves %+v (%v), want one for each of the %d cards", reserves, err, len(inv.Cards))
	}
	for _, c := range inv.Cards {
		if got := reserves.Cards[c.UUID]; got != 520 {
			t.Errorf("card %s publishes a context reserve of %d MiB, want the default 520 for an A30", c.UUID, got)
		}
	}

	p, resps := admitOnePod(ctx, t, client, k, machine.UUID(2), api.QoSBurstShare, 4096, 25)
	if got := resps["main"].Response.Envs[api.EnvQoS]; got != string(api.QoSBurstShare) {
		t.Errorf("QoS env %q", got)
	}
	if err := k.StartContainers(ctx, p); err != nil {
		t.Fatal(err)
	}
	store := &records.Store{Root: cfg.StateDir}
	limits, err := os.ReadFile(filepath.Join(store.ContainerDir(string(p.UID), "main"), records.LimitsFileName))
	if err != nil || !strings.Contains(string(limits), api.EnvContextReserveMiB+"=520\n") {
		t.Errorf("limits.env %q (%v), want the reserve the inventory publishes, %s=520", limits, err, api.EnvContextReserveMiB)
	}

	resp, err := http.Get("http://" + lis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tessera_container_gpu_memory_limit_bytes{container="main",index="2",namespace="ns",node="node-a",pod="p",uuid="` + machine.UUID(2) + `"} 4.294967296e+09`,
		`tessera_card_assigned_cores_ratio{index="2",model="NVIDIA A30",node="node-a",uuid="` + machine.UUID(2) + `"} 0.25`,
		`tessera_kubelet_calls_total{call="PreStartContainer",node="node-a",result="ok"} 1`,
		`tessera_kubelet_registrations_total{node="node-a"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The pod has no region volume (no admission webhook here): its region would be in the
	// container's /dev/shm, which the agent does not read, and so reports nothing of.
	for _, absent := range []string{`tessera_container_region_readable{container="main"`, `tessera_container_hook_loaded{container="main"`} {
		if strings.Contains(string(body), absent) {
			t.Errorf("metrics report %s... for a container whose region the agent cannot see", absent)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// On a node where NVIDIA's device plugin advertises the cards, the agent registers
// nothing with the kubelet and publishes no inventory until that plugin is gone; if it
// comes back while the agent serves, the agent stops with the conflict.
func TestTheAgentStaysOffANodeAnotherGPUPluginServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, cfg := agentOnFakeKubelet(t, "--metrics-address=")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	probe := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + lis.Addr().String() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	withGPU := func(n string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}}
	}
	client := fake.NewSimpleClientset(withGPU("4"))
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{NVML: nvmlfake.FourCardsTwoNUMA(), Client: client, CoexistInterval: 20 * time.Millisecond,
			MetricsListener: lis})
	}()

	time.Sleep(300 * time.Millisecond)
	if len(k.Health()) != 0 {
		t.Fatal("the agent registered with the kubelet while nvidia.com/gpu is advertised")
	}
	if n, _ := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); n.Annotations[api.AnnotationInventory] != "" {
		t.Fatal("the agent published an inventory while nvidia.com/gpu is advertised")
	}
	// The probes answer while it waits: alive, not ready, and why.
	if code, _ := probe("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while refusing = %d, want 200 (a liveness probe must not restart a waiting agent)", code)
	}
	if code, body := probe("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "nvidia.com/gpu=4") {
		t.Errorf("/readyz while refusing = %d %q, want 503 naming nvidia.com/gpu=4", code, body)
	}

	// NVIDIA's plugin leaves (the kubelet zeroes its resource): the agent serves.
	if _, err := client.CoreV1().Nodes().Update(ctx, withGPU("0"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration once the other plugin left: %v", err)
	}
	for code, body := probe("/readyz"); code != http.StatusOK; code, body = probe("/readyz") {
		if ctx.Err() != nil {
			t.Fatalf("/readyz after registration = %d %q, want 200", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// It comes back: the agent stops, naming it.
	n, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Capacity = withGPU("4").Status.Capacity
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu=4") {
			t.Fatalf("Run = %v, want the conflict naming nvidia.com/gpu=4", err)
		}
	case <-ctx.Done():
		t.Fatal("the agent kept serving beside the other plugin")
	}
}

// With cardHandoff: cdi the agent writes its hook spec before it registers, and the
// kubelet's Allocate answer names the assigned card and the hook as CDI devices instead
// of NVIDIA_VISIBLE_DEVICES and kubelet mounts.
func TestTheAgentInCDIModeWritesItsSpecAndNamesTheCardAsACDIDevice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, cfg := agentOnFakeKubelet(t, "--card-handoff=cdi", "--metrics-address=", "--gc-interval=50ms")
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	machine := nvmlfake.FourCardsTwoNUMA()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{NVML: machine, Client: client}) }()
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	names, problems := cdi.DeviceNames([]string{cfg.CDISpecDir}, cdi.HookKind)
	if _, ok := names[cdi.HookDevice]; !ok || len(problems) > 0 {
		t.Fatalf("hook spec in %s: %v %v", cfg.CDISpecDir, names, problems)
	}
	// A spec removed behind the agent's back is written again (every gcInterval).
	spec := filepath.Join(cfg.CDISpecDir, cdi.FileName(cdi.HookKind))
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	for _, err := os.Stat(spec); err != nil; _, err = os.Stat(spec) {
		if ctx.Err() != nil {
			t.Fatalf("hook spec not restored: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, resps := admitOnePod(ctx, t, client, k, machine.UUID(3), api.QoSFixedShare, 2048, 10)
	r := resps["main"].Response
	var got []string
	for _, d := range r.CdiDevices {
		got = append(got, d.Name)
	}
	if want := []string{"nvidia.com/gpu=" + machine.UUID(3), "tessera.io/vgpu=hook"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("CDI devices %v, want %v", got, want)
	}
	if v := r.Envs["NVIDIA_VISIBLE_DEVICES"]; v != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want void", v)
	}
	for _, m := range r.Mounts {
		if m.ContainerPath == cfg.HookLibrary || m.ContainerPath == "/etc/ld.so.preload" {
			t.Errorf("hook mount %s handed by the kubelet as well as by CDI", m.ContainerPath)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// admitOnePod binds pod ns/p with one vGPU container "main" assigned memMiB and cores
// on card uuid, and has the fake kubelet admit it.
func admitOnePod(ctx context.Context, t *testing.T, client kubernetes.Interface, k *kubeletsim.Kubelet, uuid string,
	qos api.QoSClass, memMiB int64, cores int) (*corev1.Pod, map[string]*kubeletsim.Allocation) {
	t.Helper()
	a := &api.PodAssignment{Node: "node-a", QoS: qos, Containers: []api.ContainerAssignment{
		{Name: "main", Cards: []api.CardAssignment{{UUID: uuid, MemoryMiB: memMiB, Cores: cores}}}}}
	enc, err := api.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: testPodUID,
		Annotations: map[string]string{api.AnnotationAssignment: enc, api.AnnotationHandoff: api.HandoffPending, api.AnnotationQoS: string(qos)}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"),
				api.ResourceMemory: *resource.NewQuantity(memMiB, resource.DecimalSI), api.ResourceCores: *resource.NewQuantity(int64(cores), resource.DecimalSI)}}}}}}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	resps, err := k.Admit(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return p, resps
}
