// Package kubelet is the end-to-end harness's kubelet stand-in for one simulated GPU
// node. It does what the kubelet does for Tessera and nothing more: it registers the Node
// with the capacity the device plugin advertises and keeps it Ready; it serves the real
// device plugin Registration API (v1beta1) and PodResources API (v1) over unix sockets;
// it admits the pods bound to its node one at a time as the kubelet's device manager does
// (per container GetPreferredAllocation, Allocate, then recording the slot IDs), calls
// PreStartContainer before "starting" each container, records what each container would
// receive (environment, mounts, the limits file), and moves the pod to Running and, when
// its command is `sleep N`, to Succeeded N seconds later. No container runs.
package kubelet

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
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// devices is the device manager: the plugin endpoint, its slots and who holds them.
type devices struct {
	dir      string // device plugin directory; kubelet.sock lives here
	resource string
	changed  chan struct{} // signalled when the slot list changes

	mu      sync.Mutex
	plugin  pluginapi.DevicePluginClient
	conn    *grpc.ClientConn
	opts    *pluginapi.DevicePluginOptions
	health  map[string]string // slot ID -> Healthy/Unhealthy
	pods    []*corev1.Pod     // the kubelet's active pods, in admission order
	holders map[string]map[string][]string
	regs    int
}

func newDevices(dir, resource string) *devices {
	return &devices{dir: dir, resource: resource, changed: make(chan struct{}, 1),
		health: map[string]string{}, holders: map[string]map[string][]string{}}
}

// serve runs the Registration server on kubelet.sock and the PodResources server on
// podRes until ctx ends.
func (d *devices) serve(ctx context.Context, podRes string) error {
	for _, p := range []string{filepath.Join(d.dir, "kubelet.sock"), podRes} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		_ = os.Remove(p)
	}
	reg, err := net.Listen("unix", filepath.Join(d.dir, "kubelet.sock"))
	if err != nil {
		return fmt.Errorf("listen kubelet.sock: %w", err)
	}
	pr, err := net.Listen("unix", podRes)
	if err != nil {
		return fmt.Errorf("listen pod resources: %w", err)
	}
	rs, ps := grpc.NewServer(), grpc.NewServer()
	pluginapi.RegisterRegistrationServer(rs, &registration{d: d})
	podresourcesv1.RegisterPodResourcesListerServer(ps, &podResources{d: d})
	go func() { _ = rs.Serve(reg) }()
	go func() { _ = ps.Serve(pr) }()
	go func() { <-ctx.Done(); rs.Stop(); ps.Stop() }()
	return nil
}

type registration struct{ d *devices }

func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	d := r.d
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported device plugin API version %q", req.Version)
	}
	if req.ResourceName != d.resource {
		return nil, fmt.Errorf("this node manages %q, not %q", d.resource, req.ResourceName)
	}
	conn, err := grpc.Dial("unix://"+filepath.Join(d.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("GetDevicePluginOptions: %w", err)
	}
	stream, err := client.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ListAndWatch: %w", err)
	}
	d.mu.Lock()
	if d.conn != nil {
		d.conn.Close()
	}
	d.plugin, d.conn, d.opts = client, conn, opts
	d.regs++
	d.mu.Unlock()
	klog.InfoS("Device plugin registered", "resource", req.ResourceName, "endpoint", req.Endpoint,
		"preferredAllocation", opts.GetPreferredAllocationAvailable, "preStart", opts.PreStartRequired)
	go d.watch(stream, client)
	return &pluginapi.Empty{}, nil
}

// watch follows ListAndWatch. When the stream ends the slots stay known, as during the
// kubelet's grace period for a restarting plugin.
func (d *devices) watch(stream pluginapi.DevicePlugin_ListAndWatchClient, client pluginapi.DevicePluginClient) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			klog.InfoS("Device plugin stream ended", "err", err)
			d.mu.Lock()
			if d.plugin == client {
				d.plugin = nil
			}
			d.mu.Unlock()
			return
		}
		d.mu.Lock()
		d.health = map[string]string{}
		for _, dev := range resp.Devices {
			d.health[dev.ID] = dev.Health
		}
		d.mu.Unlock()
		select {
		case d.changed <- struct{}{}:
		default:
		}
	}
}

// counts returns the slots known and the healthy ones.
func (d *devices) counts() (capacity, allocatable int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.health {
		capacity++
		if h == pluginapi.Healthy {
			allocatable++
		}
	}
	return capacity, allocatable
}

var errNoPlugin = errors.New("no device plugin registered for the resource")

// client waits (up to the deadline of ctx) for a registered plugin, as pods that need a
// resource whose plugin is restarting wait in the kubelet's admission retry.
func (d *devices) client(ctx context.Context) (pluginapi.DevicePluginClient, *pluginapi.DevicePluginOptions, error) {
	for {
		d.mu.Lock()
		p, o := d.plugin, d.opts
		d.mu.Unlock()
		if p != nil {
			return p, o, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, errNoPlugin
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// admit adds the pod to the active pods and allocates slots to each container that
// requests the resource, in spec order: GetPreferredAllocation (when offered), Allocate,
// then the IDs are recorded. The answers are returned per container.
func (d *devices) admit(ctx context.Context, pod *corev1.Pod) (map[string]*allocation, error) {
	d.mu.Lock()
	d.pods = append(d.pods, pod)
	d.mu.Unlock()
	out := map[string]*allocation{}
	for _, c := range pod.Spec.Containers {
		n := requested(c, d.resource)
		if n == 0 {
			continue
		}
		wait, cancel := context.WithTimeout(ctx, 60*time.Second)
		plugin, opts, err := d.client(wait)
		cancel()
		if err != nil {
			return nil, err
		}
		ids, err := d.choose(ctx, plugin, opts, n)
		if err != nil {
			return nil, err
		}
		resp, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIDs: ids}}})
		if err != nil {
			return nil, fmt.Errorf("allocate failed due to rpc error: %w, which is unexpected", err)
		}
		if len(resp.ContainerResponses) != 1 {
			return nil, fmt.Errorf("allocate: %d container responses for 1 request", len(resp.ContainerResponses))
		}
		d.mu.Lock()
		if d.holders[string(pod.UID)] == nil {
			d.holders[string(pod.UID)] = map[string][]string{}
		}
		d.holders[string(pod.UID)][c.Name] = ids
		d.mu.Unlock()
		out[c.Name] = &allocation{IDs: ids, Response: resp.ContainerResponses[0]}
	}
	return out, nil
}

type allocation struct {
	IDs      []string
	Response *pluginapi.ContainerAllocateResponse
}

func requested(c corev1.Container, resource string) int {
	q, ok := c.Resources.Limits[corev1.ResourceName(resource)]
	if !ok {
		q, ok = c.Resources.Requests[corev1.ResourceName(resource)]
	}
	if !ok {
		return 0
	}
	return int(q.Value())
}

// choose offers the free healthy slots to GetPreferredAllocation and falls back to the
// first free ones when the answer is unusable, as the device manager does.
func (d *devices) choose(ctx context.Context, plugin pluginapi.DevicePluginClient, opts *pluginapi.DevicePluginOptions, n int) ([]string, error) {
	d.mu.Lock()
	used := map[string]bool{}
	for _, cs := range d.holders {
		for _, ids := range cs {
			for _, id := range ids {
				used[id] = true
			}
		}
	}
	var free []string
	for id, h := range d.health {
		if h == pluginapi.Healthy && !used[id] {
			free = append(free, id)
		}
	}
	d.mu.Unlock()
	sort.Strings(free)
	if len(free) < n {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", d.resource, n, len(free))
	}
	if opts.GetPreferredAllocationAvailable {
		resp, err := plugin.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: free, AllocationSize: int32(n)}}})
		if err != nil {
			return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
		}
		if ids := resp.ContainerResponses[0].DeviceIDs; len(ids) == n && subset(ids, free) {
			return ids, nil
		}
	}
	return free[:n], nil
}

func subset(ids, of []string) bool {
	set := map[string]bool{}
	for _, id := range of {
		set[id] = true
	}
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}

// preStart calls PreStartContainer with the container's recorded IDs, when the plugin asks for it.
func (d *devices) preStart(ctx context.Context, pod *corev1.Pod, container string) error {
	d.mu.Lock()
	ids := d.holders[string(pod.UID)][container]
	d.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	plugin, opts, err := d.client(ctx)
	if err != nil {
		return err
	}
	if !opts.PreStartRequired {
		return nil
	}
	if _, err := plugin.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIDs: ids}); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
	}
	return nil
}

// release forgets a pod that terminated or was deleted and frees its slots.
func (d *devices) release(uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.holders, uid)
	for i, p := range d.pods {
		if string(p.UID) == uid {
			d.pods = append(d.pods[:i], d.pods[i+1:]...)
			break
		}
	}
}

type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	d *devices
}

// List reports the active pods and, per container, the slot IDs recorded for it.
func (p *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, pod := range d.pods {
		pr := &podresourcesv1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
		for _, c := range pod.Spec.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			if ids := d.holders[string(pod.UID)][c.Name]; len(ids) > 0 {
				cr.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: d.resource, DeviceIds: append([]string(nil), ids...)}}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}
