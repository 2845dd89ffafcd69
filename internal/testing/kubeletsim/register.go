package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// ErrNoPlugin means a call needed the device plugin and none was registered.
var ErrNoPlugin = errors.New("no device plugin registered for the resource")

var _ pluginapi.RegistrationServer = (*registration)(nil)

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *Kubelet
}

// Register connects back to the plugin, reads its options and follows its device list,
// replacing the connection of an earlier registration.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k := r.k
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported device plugin API version %q", req.Version)
	}
	if req.ResourceName != k.opts.Resource {
		return nil, fmt.Errorf("this node manages %q, not %q", k.opts.Resource, req.ResourceName)
	}
	endpoint := "unix://" + filepath.Join(k.opts.PluginDir, req.Endpoint)
	conn, err := grpc.Dial(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("GetDevicePluginOptions: %w", err)
	}
	// The stream outlives this call, so it does not take the call's context.
	stream, err := client.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ListAndWatch: %w", err)
	}
	k.mu.Lock()
	old := k.conn
	k.plugin, k.conn, k.pluginOpts = client, conn, opts
	k.registered++
	k.mu.Unlock()
	if old != nil {
		old.Close()
	}
	klog.InfoS("Device plugin registered", "resource", req.ResourceName, "endpoint", req.Endpoint,
		"preferredAllocation", opts.GetPreferredAllocationAvailable, "preStart", opts.PreStartRequired)
	go k.watch(stream, client)
	return &pluginapi.Empty{}, nil
}

// watch follows ListAndWatch. When the stream ends the slots stay known, as during the
// kubelet's grace period for a restarting plugin, but the plugin no longer serves calls.
func (k *Kubelet) watch(stream pluginapi.DevicePlugin_ListAndWatchClient, client pluginapi.DevicePluginClient) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			klog.InfoS("Device plugin stream ended", "err", err)
			k.mu.Lock()
			if k.plugin == client {
				k.plugin = nil
			}
			k.mu.Unlock()
			return
		}
		k.mu.Lock()
		k.health = map[string]string{}
		for _, d := range resp.Devices {
			k.health[d.ID] = d.Health
		}
		k.mu.Unlock()
		select {
		case k.changed <- struct{}{}:
		default:
		}
	}
}

// pluginClient returns the registered plugin. With wait it polls until one registers or
// ctx ends.
func (k *Kubelet) pluginClient(ctx context.Context, wait bool) (pluginapi.DevicePluginClient, *pluginapi.DevicePluginOptions, error) {
	for {
		k.mu.Lock()
		p, o := k.plugin, k.pluginOpts
		k.mu.Unlock()
		if p != nil {
			return p, o, nil
		}
		if !wait {
			return nil, nil, ErrNoPlugin
		}
		select {
		case <-ctx.Done():
			return nil, nil, ErrNoPlugin
		case <-time.After(50 * time.Millisecond):
		}
	}
}
