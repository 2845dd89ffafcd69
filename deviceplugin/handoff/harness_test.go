package handoff_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/kubeletserver"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/deviceplugin/podresources"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
)

const node = "node-a"

// harness runs one node agent (handoff + kubelet server) against a fake kubelet, a
// fake API server and a fake NVML machine.
type harness struct {
	t       testing.TB
	hd      *handoff.Handoff
	pods    *nodepods.Informer
	store   *records.Store
	prc     *podresources.Client
	ctx     context.Context
	client  *fake.Clientset
	kubelet *kubeletsim.Kubelet
	reg     *cards.Registry
	uuids   []string
	root    string
	sockDir string
	stop    context.CancelFunc
	stopped chan struct{}
	trust   *nodepods.Trust
	refused map[string]int // reasons counted by the observer
	mu      sync.Mutex
	// migLayout, when set before (re)starting the agent, reads MIG layouts from NVML.
	migLayout handoff.MIGLayout
}

func newHarness(t testing.TB, lib nvml.Interface, shares int) *harness {
	t.Helper()
	return newHarnessWith(t, lib, shares, nil)
}

// newHarnessWith starts the agent with trust deciding which assignments it honours.
func newHarnessWith(t testing.TB, lib nvml.Interface, shares int, trust *nodepods.Trust) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	// Unix socket paths are limited to ~108 bytes; t.TempDir() can be longer.
	sockDir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	k, err := kubeletsim.Start(kubeletsim.Options{PluginDir: sockDir, Resource: api.ResourceNumber})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	h := &harness{t: t, ctx: ctx, client: fake.NewSimpleClientset(), kubelet: k, root: t.TempDir(), sockDir: sockDir, trust: trust}
	res, err := discovery.Discover(lib, discovery.Options{Shares: shares})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Devices {
		h.uuids = append(h.uuids, d.Card.UUID)
	}
	h.startAgent(cards.NewRegistry(res.Cards(), res.Links))
	return h
}

// startAgent starts a fresh agent process: new informer, handoff and server, same disk.
func (h *harness) startAgent(reg *cards.Registry) {
	t := h.t
	h.reg = reg
	ctx, cancel := context.WithCancel(h.ctx)
	pods := nodepods.NewInformer(h.client, node)
	if err := pods.Start(ctx); err != nil {
		t.Fatal(err)
	}
	prc, err := podresources.Dial(h.kubelet.PodResourcesSocket(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(h.root, "libvgpu.so")
	cfg := handoff.Config{Node: node, Resource: api.ResourceNumber, Names: api.DefaultResourceNames(),
		IdentifyTimeout: 2 * time.Second, PollInterval: 10 * time.Millisecond,
		Container: hookenv.Container{HookLibrary: lib, PreloadHostFile: filepath.Join(h.root, "ld.so.preload"),
			Preload: config.PreloadFile, Dir: "/var/run/tessera", LogLevel: "info"}, Trust: h.trust, MIGLayout: h.migLayout}
	store := &records.Store{Root: h.root}
	hd := handoff.New(cfg, reg, pods, prc, store,
		&nodepods.PatchMarker{Client: h.client, Attempts: 3, Backoff: 10 * time.Millisecond}, &refusalCounter{h})
	srv := kubeletserver.New(kubeletserver.Options{PluginDir: h.sockDir, SocketName: "tessera.sock",
		Resource: api.ResourceNumber, WatchInterval: 20 * time.Millisecond}, reg, hd)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	h.stop, h.stopped = cancel, done
	h.hd, h.pods, h.store, h.prc = hd, pods, store, prc
	t.Cleanup(func() { cancel(); <-done; prc.Close() })
}

// restartAgent stops the agent and starts a new one on the same state directory.
func (h *harness) restartAgent() {
	h.stop()
	<-h.stopped
	regs := h.kubelet.Registrations()
	h.startAgent(cards.NewRegistry(h.reg.Inventory().Cards, h.reg.Inventory().Links))
	h.waitRegistered(regs + 1)
}

func (h *harness) waitRegistered(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if err := h.kubelet.WaitFor(ctx, kubeletsim.RegisteredAtLeast(n)); err != nil {
		h.t.Fatalf("plugin did not register %d times: %v (registered %d)", n, err, h.kubelet.Registrations())
	}
}

type ctr struct {
	name  string
	cards []api.CardAssignment // nil: a container without vGPU
}

func card(uuid string, mem int64, cores int) api.CardAssignment {
	return api.CardAssignment{UUID: uuid, MemoryMiB: mem, Cores: cores}
}

// pod builds a pod bound to the node whose assignment is exactly its containers' cards.
func pod(name string, cs ...ctr) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID("uid-" + name),
		Annotations: map[string]string{}}, Spec: corev1.PodSpec{NodeName: node}}
	a := &api.PodAssignment{Node: node, QoS: api.QoSFixedShare}
	for _, c := range cs {
		k := corev1.Container{Name: c.name}
		if c.cards != nil {
			// The spec asks for what the scheduler gave (the agent refuses more).
			var mem int64
			var cores int
			for _, cc := range c.cards {
				mem, cores = max(mem, cc.MemoryMiB), max(cores, cc.Cores)
			}
			k.Resources.Limits = corev1.ResourceList{api.ResourceNumber: *resource.NewQuantity(int64(len(c.cards)), resource.DecimalSI),
				api.ResourceMemory: *resource.NewQuantity(mem, resource.DecimalSI), api.ResourceCores: *resource.NewQuantity(int64(cores), resource.DecimalSI)}
			a.Containers = append(a.Containers, api.ContainerAssignment{Name: c.name, Cards: c.cards})
		}
		p.Spec.Containers = append(p.Spec.Containers, k)
	}
	if len(a.Containers) > 0 {
		s, err := api.EncodeAssignment(a)
		if err != nil {
			panic(err)
		}
		p.Annotations[api.AnnotationAssignment] = s
		p.Annotations[api.AnnotationAssignedAt] = strconv.FormatInt(time.Now().UnixNano(), 10)
		p.Annotations[api.AnnotationHandoff] = api.HandoffPending
	}
	return p
}

func (h *harness) bind(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Pods(p.Namespace).Create(h.ctx, p, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// handoffState polls the pod's handoff annotation until it equals want or time runs out.
func (h *harness) waitHandoff(p *corev1.Pod, want string) map[string]string {
	h.t.Helper()
	var ann map[string]string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got, err := h.client.CoreV1().Pods(p.Namespace).Get(h.ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
		ann = got.Annotations
		if ann[api.AnnotationHandoff] == want {
			return ann
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Fatalf("pod %s: handoff %q (message %q), want %q", p.Name, ann[api.AnnotationHandoff], ann[api.AnnotationHandoffMessage], want)
	return nil
}

func (h *harness) limitsFile(p *corev1.Pod, container string) string {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.root, "pods", string(p.UID), container, records.LimitsFileName))
	if err != nil {
		h.t.Fatalf("limits file of %s/%s: %v", p.Name, container, err)
	}
	return string(b)
}

type podT struct{ *corev1.Pod }

type ctrCard struct {
	index int
	mem   int64
	cores int
}

// podOnCards builds a one-container pod ("main") and what it must get; cards are listed
// in index order in the expectation, as the agent orders them.
func (h *harness) podOnCards(name string, cs []ctrCard) (*podT, expect) {
	var as []api.CardAssignment
	for _, c := range cs {
		as = append(as, card(h.uuids[c.index], c.mem, c.cores))
	}
	sorted := append([]ctrCard(nil), cs...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a].index < sorted[b].index })
	var u, m, s []string
	for _, c := range sorted {
		u = append(u, h.uuids[c.index])
		m = append(m, strconv.FormatInt(c.mem, 10))
		s = append(s, strconv.Itoa(c.cores))
	}
	return &podT{pod(name, ctr{"main", as})}, expect{strings.Join(u, ","), strings.Join(m, ","), strings.Join(s, ",")}
}

// refusalCounter is the harness's observer: it counts refused assignments by reason.
type refusalCounter struct{ h *harness }

func (r *refusalCounter) ObserveCall(string, error, time.Duration) {}

func (r *refusalCounter) ObserveRefusal(reason string) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.h.refused == nil {
		r.h.refused = map[string]int{}
	}
	r.h.refused[reason]++
}

func (h *harness) refusals(reason string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused[reason]
}
