// Package kubelet is the end-to-end harness's kubelet stand-in for one simulated GPU
// node. It does what the kubelet does for Tessera and nothing more: it registers the Node
// with the capacity the device plugin advertises and keeps it Ready; through
// deviceplugin/kubeletsim it serves the real device plugin Registration API (v1beta1) and
// PodResources API (v1) over unix sockets and admits the pods bound to its node one at a
// time as the kubelet's device manager does (per container GetPreferredAllocation,
// Allocate, then recording the slot IDs); it calls PreStartContainer before "starting"
// each container, records what each container would receive (environment, mounts, the
// limits file), and moves the pod to Running and, when its command is `sleep N`, to
// Succeeded N seconds later. No container runs.
package kubelet

import (
	"context"
	"fmt"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/deviceplugin/kubeletsim"
)

// pluginWait is how long admission waits for a restarting device plugin, as pods wait in
// the kubelet's admission retry.
const pluginWait = 60 * time.Second

// startDevices serves the device manager's sockets until ctx ends.
func startDevices(ctx context.Context, opts Options) (*kubeletsim.Kubelet, error) {
	dev, err := kubeletsim.Start(kubeletsim.Options{PluginDir: opts.DevicePluginDir,
		PodResourcesSocket: opts.PodResourcesSocket, Resource: opts.Resource, PluginWait: pluginWait})
	if err != nil {
		return nil, fmt.Errorf("device manager: %w", err)
	}
	go func() { <-ctx.Done(); dev.Stop() }()
	return dev, nil
}

// slotCounts returns the slots the plugin lists and the healthy ones.
func slotCounts(dev *kubeletsim.Kubelet) (capacity, allocatable int) {
	for _, h := range dev.Health() {
		capacity++
		if h == pluginapi.Healthy {
			allocatable++
		}
	}
	return capacity, allocatable
}
