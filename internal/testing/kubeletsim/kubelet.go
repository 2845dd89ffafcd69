// Package kubeletsim is a kubelet simulation for tests and the end-to-end harness, not
// product code: the agent never imports it. It plays the part of the kubelet a device
// plugin talks to. It serves the real v1beta1 Registration API and the PodResources v1
// API over unix sockets, follows the plugin's ListAndWatch stream, and admits pods as the
// kubelet's device manager does: one pod at a time; per container GetPreferredAllocation
// (when offered), then Allocate, then recording the slot IDs; PreStartContainer when the
// container starts.
//
// The device plugin's unit tests drive it directly; the end-to-end harness runs the real
// kubelet instead. Its PodResources answers follow the kubelet v1.34's shape (one entry
// per slot), so that the agent is tested against what the kubelet really sends.
package kubeletsim

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// registrationSocket is the kubelet's Registration socket, in the plugin directory.
const registrationSocket = "kubelet.sock"

// Options configure a simulated kubelet.
type Options struct {
	PluginDir          string // kubelet.sock and the plugins' sockets live here
	PodResourcesSocket string // default: pod-resources.sock in PluginDir
	Resource           string // the extended resource the plugin must register
	// PluginWait, when set, makes Admit wait up to PluginWait per container, and PreStart
	// as long as its context allows, for a plugin to register, as pods wait in the
	// kubelet's admission retry while a plugin restarts. Zero fails at once with ErrNoPlugin.
	PluginWait time.Duration
}

// Kubelet is one simulated kubelet. It is safe for concurrent use.
type Kubelet struct {
	opts      Options
	podres    *grpc.Server
	changed   chan struct{}
	admission sync.Mutex // one pod admitted at a time

	mu              sync.Mutex
	reg             *grpc.Server
	regDone         chan struct{}
	plugin          pluginapi.DevicePluginClient
	conn            *grpc.ClientConn
	pluginOpts      *pluginapi.DevicePluginOptions
	registered      int
	ignorePreferred bool
	beforeAllocate  func()
	health          map[string]string // slot ID -> Healthy/Unhealthy
	pods            []*corev1.Pod     // active pods, in admission order
	holders         map[types.UID]map[string][]string
	// lost: pods whose slots the device accounting has dropped while PodResources
	// still reports them (LoseAllocation).
	lost         map[types.UID]bool
	lastAllocate time.Duration
}

// Start serves the PodResources and Registration sockets, replacing sockets left by an
// earlier run.
func Start(opts Options) (*Kubelet, error) {
	if opts.PodResourcesSocket == "" {
		opts.PodResourcesSocket = filepath.Join(opts.PluginDir, "pod-resources.sock")
	}
	k := &Kubelet{opts: opts, changed: make(chan struct{}, 1),
		health: map[string]string{}, holders: map[types.UID]map[string][]string{}, lost: map[types.UID]bool{}}
	if err := prepareSocket(opts.PodResourcesSocket); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", opts.PodResourcesSocket)
	if err != nil {
		return nil, fmt.Errorf("listen pod resources: %w", err)
	}
	k.podres = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(k.podres, &podResources{k: k})
	go func() { _ = k.podres.Serve(lis) }()
	if err := k.startRegistration(); err != nil {
		k.podres.Stop()
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) startRegistration() error {
	path := filepath.Join(k.opts.PluginDir, registrationSocket)
	if err := prepareSocket(path); err != nil {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen %s: %w", registrationSocket, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(g, &registration{k: k})
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	k.mu.Lock()
	k.reg, k.regDone = g, done
	k.mu.Unlock()
	return nil
}

// prepareSocket creates the socket's directory and removes a socket an earlier run left.
func prepareSocket(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// Restart behaves like a kubelet restart: the registration socket goes away, every
// plugin socket in the directory is removed, and kubelet.sock comes back. Allocated
// devices survive, as the kubelet's checkpoint does.
func (k *Kubelet) Restart() error {
	k.mu.Lock()
	reg, done, conn := k.reg, k.regDone, k.conn
	k.plugin, k.conn, k.pluginOpts = nil, nil, nil
	k.mu.Unlock()
	reg.Stop()
	<-done
	if conn != nil {
		conn.Close()
	}
	entries, err := os.ReadDir(k.opts.PluginDir)
	if err != nil {
		return fmt.Errorf("read plugin directory: %w", err)
	}
	for _, e := range entries {
		if p := filepath.Join(k.opts.PluginDir, e.Name()); p != k.opts.PodResourcesSocket {
			os.Remove(p) // best effort, like the kubelet's own clean-up
		}
	}
	return k.startRegistration()
}

// Stop ends both servers and the plugin connection.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	reg, conn := k.reg, k.conn
	k.mu.Unlock()
	reg.Stop()
	k.podres.Stop()
	if conn != nil {
		conn.Close()
	}
}

// PodResourcesSocket is the path the PodResources API is served on.
func (k *Kubelet) PodResourcesSocket() string { return k.opts.PodResourcesSocket }

// Changed is signalled (without blocking, so several changes may merge into one) when the
// plugin sends a new device list.
func (k *Kubelet) Changed() <-chan struct{} { return k.changed }

// Registrations counts successful registrations so far.
func (k *Kubelet) Registrations() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.registered
}

// Health returns the last device list: slot ID -> Healthy/Unhealthy.
func (k *Kubelet) Health() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]string, len(k.health))
	for id, h := range k.health {
		out[id] = h
	}
	return out
}

// SetIgnorePreferred makes admission take the first free slots whatever the plugin
// prefers, as the kubelet does when topology alignment leaves it no choice.
func (k *Kubelet) SetIgnorePreferred(ignore bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ignorePreferred = ignore
}

// BeforeAllocate runs f after admission has chosen a container's slots and before it
// calls Allocate with them (nil: nothing), where the real kubelet waits for
// GetPreferredAllocation and the card may change meanwhile.
func (k *Kubelet) BeforeAllocate(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.beforeAllocate = f
}

// LastAllocate is how long the last Allocate call took, round trip.
func (k *Kubelet) LastAllocate() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastAllocate
}
