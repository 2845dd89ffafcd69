package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/dra"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// draNode is an agent's node in a test: the fake kubelet (device plugin registration and
// PodResources), the agent's configuration with the DRA sockets in a short temporary
// directory, a fake API server holding the Node, and a fake NVML machine whose cards the
// NVIDIA toolkit's CDI spec names by UUID.
type draNode struct {
	kubelet *kubeletsim.Kubelet
	cfg     *config.Config
	client  *fake.Clientset
	machine *nvmlfake.Machine
	// procRoot is the procfs the agent reads (Deps.ProcRoot): by default an empty
	// directory, where the agent does not see the host's processes and its memory guard
	// stays off.
	procRoot string
}

func newDRANode(t *testing.T, extra ...string) *draNode {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir's can be longer.
	socks, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(socks) })
	// The kubelet creates the registration directory; the driver's own directory is left
	// for the agent to create.
	if err := os.Mkdir(filepath.Join(socks, "reg"), 0o755); err != nil {
		t.Fatal(err)
	}
	k, cfg := agentOnFakeKubelet(t, append([]string{"--metrics-address=", "--dra-plugin-dir=" + filepath.Join(socks, "plugins"),
		"--dra-registration-dir=" + filepath.Join(socks, "reg")}, extra...)...)
	n := &draNode{kubelet: k, cfg: cfg, machine: nvmlfake.FourCardsTwoNUMA(), procRoot: t.TempDir(),
		client: fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}})}
	s := &specs.Spec{Version: cdi.Version, Kind: cfg.CDICardKind}
	for i := 0; i < 4; i++ {
		s.Devices = append(s.Devices, specs.Device{Name: n.machine.UUID(i),
			ContainerEdits: specs.ContainerEdits{Env: []string{fmt.Sprintf("FAKE_CARD_%d=%s", i, n.machine.UUID(i))}}})
	}
	if _, err := cdi.Write(cfg.CDISpecDir, s); err != nil {
		t.Fatal(err)
	}
	return n
}

// run starts the agent; the returned channel gives Run's result. lis, when not nil,
// serves the agent's /metrics, /healthz and /readyz.
func (n *draNode) run(ctx context.Context, lis net.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, n.cfg, Deps{NVML: n.machine, Client: n.client, MetricsListener: lis, ProcRoot: n.procRoot})
	}()
	return done
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (n *draNode) slices(ctx context.Context, t *testing.T, check func(*resourceapi.ResourceSlice) bool) *resourceapi.ResourceSlice {
	t.Helper()
	for {
		l, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 1 && check(&l.Items[0]) {
			return &l.Items[0]
		}
		if ctx.Err() != nil {
			t.Fatalf("no ResourceSlice as expected; last list %+v (%v)", l, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *draNode) annotation(ctx context.Context, t *testing.T, key string) string {
	t.Helper()
	for {
		node, err := n.client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err == nil && node.Annotations[key] != "" {
			return node.Annotations[key]
		}
		if ctx.Err() != nil {
			t.Fatalf("node annotation %s never written", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// With cardAPI dra the agent publishes the node's cards as a ResourceSlice, registers the
// DRA driver on the kubelet's registration socket, registers no device plugin, shows
// tessera.io/card-api: dra beside the inventory, prepares a claim through the kubelet's DRA
// gRPC API with the agent's own context reserve, taints a card its health monitor finds
// lost, and stops cleanly.
func TestTheAgentInDRAModeServesTheDRADriverInsteadOfTheDevicePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newDRANode(t, "--card-api=dra", "--health-check-interval=50ms", "--memory-guard=enforce")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := n.run(ctx, lis)

	slice := n.slices(ctx, t, func(*resourceapi.ResourceSlice) bool { return true })
	if slice.Spec.Driver != dra.DriverName || slice.Spec.NodeName == nil || *slice.Spec.NodeName != "node-a" || len(slice.Spec.Devices) != 4 {
		t.Fatalf("slice %+v, want node-a's 4 cards of driver %s", slice.Spec, dra.DriverName)
	}
	for i, d := range slice.Spec.Devices {
		if uuid := d.Attributes["uuid"].StringValue; d.Name != fmt.Sprintf("card-%d", i) || uuid == nil || *uuid != n.machine.UUID(i) {
			t.Errorf("device %d: %s with uuid %v, want card-%d of %s", i, d.Name, uuid, i, n.machine.UUID(i))
		}
	}

	// Ready once the driver serves; the cards' gauges and the memory guard's, off (the
	// agent does not see the host's processes here).
	// The slice is published while the driver finishes starting: wait for both (a loaded
	// machine can take a second or more), never for longer than the test's deadline.
	base := "http://" + lis.Addr().String()
	wants := []string{
		`tessera_card_healthy{index="1",model="NVIDIA A30",node="node-a",uuid="` + n.machine.UUID(1) + `"} 1`,
		`tessera_agent_memory_guard_active{node="node-a"} 0`,
	}
	var code int
	var body, metricsText string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body = get(t, base+"/readyz")
		_, metricsText = get(t, base+"/metrics")
		ok := code == http.StatusOK
		for _, want := range wants {
			ok = ok && strings.Contains(metricsText, want)
		}
		if ok || time.Now().After(deadline) {
			break
		}
	}
	if code != http.StatusOK {
		t.Errorf("/readyz = %d %q 10 s after the driver published its slice, want 200", code, body)
	}
	for _, want := range wants {
		if !strings.Contains(metricsText, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	pluginSock := filepath.Join(n.cfg.DRAPluginDir, dra.DriverName, "dra.sock")
	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(n.cfg.DRARegistrationDir, dra.DriverName+"-reg.sock"))).
		GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("registration socket: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != dra.DriverName || info.Endpoint != pluginSock {
		t.Errorf("registration info %+v, want a DRA plugin %s at %s", info, dra.DriverName, pluginSock)
	}

	if got := n.annotation(ctx, t, api.AnnotationCardAPI); got != config.CardAPIDRA {
		t.Errorf("%s=%q, want dra", api.AnnotationCardAPI, got)
	}
	if inv, err := api.DecodeInventory(n.annotation(ctx, t, api.AnnotationInventory)); err != nil || len(inv.Cards) != 4 {
		t.Errorf("inventory %+v (%v), want the 4 cards", inv, err)
	}

	claim := shareOfCard1(t, ctx, n)
	resp, err := drapb.NewDRAPluginClient(dial(t, pluginSock)).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Claims[string(claim.UID)]
	want := []string{n.cfg.CDICardKind + "=" + n.machine.UUID(1), dra.ClaimKind + "=" + string(claim.UID) + "-card-1"}
	if got == nil || got.Error != "" || len(got.Devices) != 1 || !reflect.DeepEqual(got.Devices[0].CDIDeviceIDs, want) {
		t.Fatalf("prepare answered %+v, want one device with CDI devices %v", got, want)
	}
	limits, err := os.ReadFile(filepath.Join(dra.StateDir(n.cfg.StateDir), "pods", string(claim.UID), "claim", records.LimitsFileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{api.EnvVisibleUUIDs + "=" + n.machine.UUID(1), api.EnvMemoryLimitMiB + "=4096", api.EnvSMLimit + "=30",
		api.EnvContextReserveMiB + "=520"} {
		if !strings.Contains(string(limits), line+"\n") {
			t.Errorf("the claim's limits.env lacks %s:\n%s", line, limits)
		}
	}
	// What a CDI-enabled runtime makes of the two devices: the card, and the limits
	// file read-only where vgpu-core reads it.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cfg.CDISpecDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	oci := &ocispec.Spec{Process: &ocispec.Process{}}
	if unresolved, err := cache.InjectDevices(oci, want...); err != nil {
		t.Fatalf("the runtime cannot resolve %v: %v", unresolved, err)
	}
	if env := strings.Join(oci.Process.Env, " "); !strings.Contains(env, "FAKE_CARD_1="+n.machine.UUID(1)) || !strings.Contains(env, api.EnvMemoryLimitMiB+"=4096") {
		t.Errorf("container environment %v", oci.Process.Env)
	}

	// The agent's health monitor taints a card that stops answering NVML.
	n.machine.SetLost(2, true)
	n.slices(ctx, t, func(s *resourceapi.ResourceSlice) bool {
		return len(s.Spec.Devices[2].Taints) == 1 && s.Spec.Devices[2].Taints[0].Key == dra.TaintUnhealthy
	})

	if r := n.kubelet.Registrations(); r != 0 {
		t.Errorf("the fake kubelet saw %d device plugin registrations, want none", r)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DevicePluginDir, n.cfg.PluginSocket)); !os.IsNotExist(err) {
		t.Errorf("device plugin socket %s exists in dra mode (%v)", n.cfg.PluginSocket, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := os.Stat(pluginSock); !os.IsNotExist(err) {
		t.Errorf("the driver's socket is left after Run returned (%v)", err)
	}
	// The prepared claim outlives the agent: a new one finds it in the checkpoint.
	ck, err := os.ReadFile(filepath.Join(dra.StateDir(n.cfg.StateDir), dra.CheckpointFile))
	if err != nil || !strings.Contains(string(ck), string(claim.UID)) {
		t.Errorf("checkpoint %q (%v), want claim %s in it", ck, err, claim.UID)
	}
}

// shareOfCard1 stores a claim allocated 4096Mi and 30 cores of card-1 in the fake API
// server, as the scheduler's allocator writes it.
func shareOfCard1(t *testing.T, ctx context.Context, n *draNode) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train-0-gpu",
		UID: "6a1c0f3e-0000-4000-8000-000000000001"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: "card-1",
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
					"memory": resource.MustParse("4096Mi"), "cores": resource.MustParse("30")}}}}}}}
	if _, err := n.client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return claim
}

// In device-plugin mode (the default) nothing of DRA starts: no ResourceSlice, no socket in
// either DRA directory; the node shows tessera.io/card-api: device-plugin.
func TestTheAgentInDevicePluginModeStartsNothingOfDRA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newDRANode(t)
	done := n.run(ctx, nil)
	if err := n.kubelet.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no device plugin registration: %v", err)
	}
	if got := n.annotation(ctx, t, api.AnnotationCardAPI); got != config.CardAPIDevicePlugin {
		t.Errorf("%s=%q, want device-plugin", api.AnnotationCardAPI, got)
	}
	if l, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("ResourceSlices in device-plugin mode: %+v (%v)", l, err)
	}
	if entries, err := os.ReadDir(n.cfg.DRARegistrationDir); err != nil || len(entries) != 0 {
		t.Errorf("registration directory holds %v (%v), want nothing", entries, err)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DRAPluginDir, dra.DriverName)); !os.IsNotExist(err) {
		t.Errorf("the DRA driver's socket directory exists in device-plugin mode (%v)", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A DRA driver that cannot start ends Run with its error, before anything is served: here
// a checkpoint that does not decode, which the driver refuses rather than hand cards out
// twice.
func TestADRADriverThatCannotStartEndsRunWithItsError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newDRANode(t, "--card-api=dra")
	dir := dra.StateDir(n.cfg.StateDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, dra.CheckpointFile), []byte(`{"version":"v1","claims":`), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.run(ctx, nil):
		if err == nil || !strings.Contains(err.Error(), "start the DRA driver") || !strings.Contains(err.Error(), dra.CheckpointFile) {
			t.Errorf("Run = %v, want the driver's start error naming its checkpoint", err)
		}
	case <-ctx.Done():
		t.Fatal("Run kept going with a driver that could not start")
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DRARegistrationDir, dra.DriverName+"-reg.sock")); !os.IsNotExist(err) {
		t.Errorf("registration socket left behind (%v)", err)
	}
}

type fakeDriver struct {
	done chan struct{}
	err  error
}

func (f *fakeDriver) Done() <-chan struct{} { return f.done }
func (f *fakeDriver) Err() error            { return f.err }

// Run ends with the driver's own error when the driver stops first, and with nil when
// the agent is told to stop (the driver's context ends with the agent's).
func TestWaitDriverTellsTheDriversOwnStopFromTheAgents(t *testing.T) {
	fatal := errors.New("DRA gRPC server failed: accept: too many open files")
	for _, tt := range []struct {
		name          string
		agentStopped  bool
		driverStopped bool
		driverErr     error
		want          string
	}{
		{"the agent stops: nil", true, false, nil, ""},
		{"the agent stops and the driver with it: nil", true, true, nil, ""},
		{"the driver fails on its own: its error", false, true, fatal, "too many open files"},
		{"the driver stops on its own without an error: still an error", false, true, nil, "stopped without an error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := &fakeDriver{done: make(chan struct{}), err: tt.driverErr}
			if tt.agentStopped {
				cancel()
			}
			if tt.driverStopped {
				close(d.done)
			}
			err := waitDriver(ctx, d)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("waitDriver = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("waitDriver = %v, want an error with %q", err, tt.want)
			case tt.driverErr != nil && !errors.Is(err, tt.driverErr):
				t.Errorf("waitDriver = %v does not wrap the driver's error", err)
			}
		})
	}
}

// In dra mode as in device-plugin mode, the agent publishes nothing on a node where
// NVIDIA's device plugin advertises the cards, serves once it is gone, and stops with the
// conflict when it comes back.
func TestTheAgentInDRAModeStaysOffANodeAnotherGPUPluginServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := newDRANode(t, "--card-api=dra")
	setGPUs := func(count string) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(count)}
		if _, err := n.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setGPUs("4")
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, n.cfg, Deps{NVML: n.machine, Client: n.client, CoexistInterval: 20 * time.Millisecond})
	}()
	time.Sleep(300 * time.Millisecond)
	if l, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("the agent published %d ResourceSlices (%v) while nvidia.com/gpu is advertised", len(l.Items), err)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DRARegistrationDir, dra.DriverName+"-reg.sock")); !os.IsNotExist(err) {
		t.Fatalf("the driver registered while nvidia.com/gpu is advertised (%v)", err)
	}
	setGPUs("0")
	n.slices(ctx, t, func(*resourceapi.ResourceSlice) bool { return true })
	setGPUs("4")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu=4") {
			t.Fatalf("Run = %v, want the conflict naming nvidia.com/gpu=4", err)
		}
	case <-ctx.Done():
		t.Fatal("the agent kept serving DRA beside the other plugin")
	}
}

// Uninstalled in dra mode, the agent removes the host files only when no claim is still
// prepared: a container started with a claim mounts its limits file from the state
// directory.
func TestTheAgentInDRAModeKeepsHostFilesForPreparedClaims(t *testing.T) {
	for _, tt := range []struct {
		name    string
		prepare bool
		removed bool
	}{
		{"uninstalled with no claim prepared: removed", false, true},
		{"uninstalled with a claim prepared: kept", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n := newDRANode(t, "--card-api=dra", "--uninstall-daemonset=gpu/tessera-agent")
			if err := os.WriteFile(n.cfg.HookLibrary, []byte("lib"), 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := n.client.AppsV1().DaemonSets("gpu").Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu", Name: "tessera-agent"}},
				metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			done := n.run(ctx, nil)
			n.slices(ctx, t, func(*resourceapi.ResourceSlice) bool { return true })
			if tt.prepare {
				claim := shareOfCard1(t, ctx, n)
				resp, err := drapb.NewDRAPluginClient(dial(t, filepath.Join(n.cfg.DRAPluginDir, dra.DriverName, "dra.sock"))).NodePrepareResources(ctx,
					&drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID)}}})
				if err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
					t.Fatalf("prepare: %v %+v", err, resp)
				}
			}
			if err := n.client.AppsV1().DaemonSets("gpu").Delete(ctx, "tessera-agent", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, p := range []string{n.cfg.HookLibrary, filepath.Join(n.cfg.StateDir, "ld.so.preload")} {
				if _, err := os.Stat(p); (err == nil) == tt.removed {
					t.Errorf("%s: stat %v, want removed %t", p, err, tt.removed)
				}
			}
		})
	}
}
