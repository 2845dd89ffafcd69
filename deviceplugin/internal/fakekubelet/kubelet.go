// Package fakekubelet is a kubelet stand-in for tests: it serves the real v1beta1
// Registration API and the PodResources v1 API over unix sockets, and admits pods the
// way the kubelet's device manager does (one pod at a time; per container
// GetPreferredAllocation, then Allocate, then recording the IDs; PreStartContainer
// when the container starts).
package fakekubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Kubelet is safe for concurrent use.
type Kubelet struct {
	Dir      string // device plugin directory (kubelet.sock lives here)
	PodRes   string // PodResources socket path
	Resource string
	// IgnorePreferred makes the kubelet take the first free slots whatever the plugin
	// prefers, as it does when topology alignment leaves it no choice.
	IgnorePreferred bool

	mu           sync.Mutex
	reg          *grpc.Server
	regDone      chan struct{}
	podres       *grpc.Server
	plugin       pluginapi.DevicePluginClient
	conn         *grpc.ClientConn
	opts         *pluginapi.DevicePluginOptions
	registered   int
	health       map[string]string // slot ID -> health
	pods         []*corev1.Pod
	devices      map[string]map[string][]string // pod UID -> container -> slot IDs
	admission    sync.Mutex
	lastAllocate time.Duration
}

// Start serves both sockets under dir.
func Start(dir, resource string) (*Kubelet, error) {
	k := &Kubelet{Dir: dir, PodRes: filepath.Join(dir, "pod-resources.sock"), Resource: resource,
		health: map[string]string{}, devices: map[string]map[string][]string{}}
	lis, err := net.Listen("unix", k.PodRes)
	if err != nil {
		return nil, fmt.Errorf("listen pod resources: %w", err)
	}
	k.podres = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(k.podres, &podResources{k: k})
	go func() { _ = k.podres.Serve(lis) }()
	if err := k.startRegistration(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) startRegistration() error {
	lis, err := net.Listen("unix", filepath.Join(k.Dir, "kubelet.sock"))
	if err != nil {
		return fmt.Errorf("listen kubelet.sock: %w", err)
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

// Restart behaves like a kubelet restart: the registration socket goes away, every
// plugin socket in the directory is removed, and kubelet.sock comes back. Allocated
// devices survive, as the kubelet's checkpoint does.
func (k *Kubelet) Restart() error {
	k.mu.Lock()
	reg, done, conn := k.reg, k.regDone, k.conn
	k.plugin, k.conn, k.opts = nil, nil, nil
	k.mu.Unlock()
	reg.Stop()
	<-done
	if conn != nil {
		conn.Close()
	}
	entries, err := os.ReadDir(k.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if p := filepath.Join(k.Dir, e.Name()); p != k.PodRes {
			os.Remove(p)
		}
	}
	return k.startRegistration()
}

// Stop ends every server and connection.
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

type registration struct{ k *Kubelet }

func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k := r.k
	if req.Version != pluginapi.Version || req.ResourceName != k.Resource {
		return nil, fmt.Errorf("fake kubelet: unexpected registration %+v", req)
	}
	conn, err := grpc.Dial("unix://"+filepath.Join(k.Dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	stream, err := client.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	k.mu.Lock()
	k.plugin, k.conn, k.opts = client, conn, opts
	k.registered++
	k.mu.Unlock()
	go k.watch(stream)
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) watch(stream pluginapi.DevicePlugin_ListAndWatchClient) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		k.mu.Lock()
		k.health = map[string]string{}
		for _, d := range resp.Devices {
			k.health[d.ID] = d.Health
		}
		k.mu.Unlock()
	}
}

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

// WaitFor polls cond (called without the lock) until it holds or ctx ends.
func (k *Kubelet) WaitFor(ctx context.Context, cond func(k *Kubelet) bool) error {
	for !cond(k) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// RegisteredAtLeast is a WaitFor condition: n registrations and a device list.
func RegisteredAtLeast(n int) func(*Kubelet) bool {
	return func(k *Kubelet) bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.registered >= n && k.plugin != nil && len(k.health) > 0
	}
}

var errNotRegistered = errors.New("fake kubelet: no plugin registered")

func (k *Kubelet) client() (pluginapi.DevicePluginClient, *pluginapi.DevicePluginOptions, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.plugin == nil {
		return nil, nil, errNotRegistered
	}
	return k.plugin, k.opts, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
