package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/yaml"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

const testNode = "node-a"

// node is a fake node: its NVML machine, the agent's registry over it, a fake API
// server holding the Node, and the directories a driver on it uses.
type node struct {
	machine *nvmlfake.Machine
	res     *discovery.Result
	reg     *cards.Registry
	client  *fake.Clientset
	root    string
	cfg     Config
}

func newNode(t *testing.T) *node {
	t.Helper()
	m := nvmlfake.FourCardsTwoNUMA()
	res, err := discovery.Discover(m, discovery.Options{Shares: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Unix socket paths are limited to 108 bytes; t.TempDir's can be long.
	root, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	n := &node{machine: m, res: res, reg: cards.NewRegistry(res.Cards(), res.Links), root: root,
		client: fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}})}
	for _, d := range []string{"state", "cdi", "reg", "plugin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.cfg = Config{
		NodeName:      testNode,
		RegistrarDir:  filepath.Join(root, "reg"),
		PluginDataDir: filepath.Join(root, "plugin"),
		Prepare: PrepareConfig{
			StateDir:   StateDir(filepath.Join(root, "state")),
			CDISpecDir: filepath.Join(root, "cdi"),
			CardKind:   "nvidia.com/gpu",
			Container: hookenv.Container{HookLibrary: filepath.Join(root, "libvgpu.so"), LogLevel: "info",
				PreloadHostFile: filepath.Join(root, "state", "ld.so.preload"), CardKind: "nvidia.com/gpu"},
		},
	}
	n.writeNVIDIASpec(t)
	return n
}

// writeNVIDIASpec stands in for the NVIDIA toolkit's spec: nvidia.com/gpu devices named
// by card UUID.
func (n *node) writeNVIDIASpec(t *testing.T) {
	s := &specs.Spec{Version: cdi.Version, Kind: "nvidia.com/gpu"}
	for _, d := range n.res.Devices {
		s.Devices = append(s.Devices, specs.Device{Name: d.Card.UUID,
			ContainerEdits: specs.ContainerEdits{Env: []string{"FAKE_CARD_" + fmt.Sprint(d.Card.Index) + "=" + d.Card.UUID}}})
	}
	if _, err := cdi.Write(n.cfg.Prepare.CDISpecDir, s); err != nil {
		t.Fatal(err)
	}
}

func (n *node) start(t *testing.T) *Driver {
	t.Helper()
	d := New(n.cfg, n.client, n.reg)
	if err := d.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(d.Stop)
	return d
}

// kubelet dials the driver's DRA socket as the kubelet does.
func (n *node) kubelet(t *testing.T) drapb.DRAPluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.cfg.PluginDataDir, "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return drapb.NewDRAPluginClient(conn)
}

// slices waits until the fake API server holds the driver's slices and check(slices)
// holds.
func (n *node) slices(t *testing.T, check func([]*resourceapi.ResourceSlice) bool) []*resourceapi.ResourceSlice {
	t.Helper()
	var out []*resourceapi.ResourceSlice
	waitFor(t, "the ResourceSlice", func() bool {
		l, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		out = out[:0]
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return len(out) > 0 && check(out)
	})
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readYAML(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, x := range c {
		if x.Name == name {
			return x, nil
		}
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

// allocate runs Kubernetes 1.34's structured allocator, as the scheduler (or Volcano's
// predicates plugin) does, over the published slices for a claim made from template, and
// stores the allocated claim in the fake API server under uid. It returns nil when the
// claim does not fit. allocated are claims already on the node.
func (n *node) allocate(t *testing.T, template, uid string, slices []*resourceapi.ResourceSlice, allocated ...*resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	var class resourceapi.DeviceClass
	readYAML(t, "deviceclass.yaml", &class)
	var tmpl resourceapi.ResourceClaimTemplate
	readYAML(t, template, &tmpl)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: tmpl.Namespace, Name: tmpl.Name + "-" + uid[len(uid)-4:],
		UID: types.UID(uid)}, Spec: tmpl.Spec.Spec}
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, c := range allocated {
		for _, r := range c.Status.Allocation.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
	alloc, err := structured.NewAllocator(context.Background(), structured.Features{ConsumableCapacity: true, DeviceTaints: true},
		state, classes{&class}, slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	nodeObj, err := n.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := alloc.Allocate(context.Background(), nodeObj, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if len(res) == 0 {
		return nil
	}
	claim.Status.Allocation = &res[0]
	n.store(t, claim)
	return claim
}

// store creates the claim, allocation included, in the fake API server.
func (n *node) store(t *testing.T, claim *resourceapi.ResourceClaim) {
	t.Helper()
	if _, err := n.client.ResourceV1().ResourceClaims(claim.Namespace).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ref(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)}
}

// setCordons writes the node's cordon annotation in the fake API server, as
// kubectl tessera cordon does.
func (n *node) setCordons(t *testing.T, v string) {
	t.Helper()
	node, err := n.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations = map[string]string{api.AnnotationCordonedCards: v}
	if _, err := n.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cordon is the cordon annotation's value with one card cordoned.
func cordon(t *testing.T, uuid, reason string) string {
	t.Helper()
	v, err := api.EncodeCordons(&api.NodeCordons{Cards: map[string]api.CardCordon{uuid: {Reason: reason, Since: time.Now()}}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
