package kubeletsim

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Allocation is what one container got at admission.
type Allocation struct {
	IDs      []string // the slots the kubelet chose
	Response *pluginapi.ContainerAllocateResponse
}

// Admit adds the pod to the active pods and allocates slots to each container that
// requests the resource, in spec order, as the device manager does. It returns the
// allocations per container name. A pod that fails stays active without devices, as a
// rejected pod does, until Release.
func (k *Kubelet) Admit(ctx context.Context, pod *corev1.Pod) (map[string]*Allocation, error) {
	k.admission.Lock()
	defer k.admission.Unlock()
	k.mu.Lock()
	k.pods = append(k.pods, pod)
	k.mu.Unlock()
	out := map[string]*Allocation{}
	for _, c := range pod.Spec.Containers {
		n := requested(c, k.opts.Resource)
		if n == 0 {
			continue
		}
		a, err := k.allocate(ctx, n)
		if err != nil {
			return nil, err
		}
		k.mu.Lock()
		if k.holders[pod.UID] == nil {
			k.holders[pod.UID] = map[string][]string{}
		}
		k.holders[pod.UID][c.Name] = a.IDs
		k.mu.Unlock()
		out[c.Name] = a
	}
	return out, nil
}

// requested is the container's count of the resource: its limit, else its request.
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

// allocate chooses n slots for one container and calls Allocate with them.
func (k *Kubelet) allocate(ctx context.Context, n int) (*Allocation, error) {
	wait, cancel := context.WithTimeout(ctx, k.opts.PluginWait)
	plugin, opts, err := k.pluginClient(wait, k.opts.PluginWait > 0)
	cancel()
	if err != nil {
		return nil, err
	}
	ids, err := k.choose(ctx, plugin, opts, n)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	hook := k.beforeAllocate
	k.mu.Unlock()
	if hook != nil {
		hook()
	}
	start := time.Now()
	resp, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	k.mu.Lock()
	k.lastAllocate = time.Since(start)
	k.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("allocate failed due to rpc error: %w, which is unexpected", err)
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("allocate: %d container responses for 1 request", len(resp.ContainerResponses))
	}
	return &Allocation{IDs: ids, Response: resp.ContainerResponses[0]}, nil
}

// choose offers the free healthy slots to GetPreferredAllocation and falls back to the
// first free ones when the answer is unusable, as the device manager does.
func (k *Kubelet) choose(ctx context.Context, plugin pluginapi.DevicePluginClient, opts *pluginapi.DevicePluginOptions, n int) ([]string, error) {
	k.mu.Lock()
	free := k.freeSlots()
	ignore := k.ignorePreferred
	k.mu.Unlock()
	if len(free) < n {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", k.opts.Resource, n, len(free))
	}
	if !opts.GetPreferredAllocationAvailable || ignore {
		return free[:n], nil
	}
	resp, err := plugin.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: free, AllocationSize: int32(n)}}})
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
	}
	if rs := resp.ContainerResponses; len(rs) == 1 && len(rs[0].DeviceIDs) == n && subset(rs[0].DeviceIDs, free) {
		return rs[0].DeviceIDs, nil
	}
	return free[:n], nil
}

// freeSlots lists the healthy slots no container holds, sorted. k.mu must be held.
func (k *Kubelet) freeSlots() []string {
	used := map[string]bool{}
	for uid, cs := range k.holders {
		if k.lost[uid] {
			continue
		}
		for _, ids := range cs {
			for _, id := range ids {
				used[id] = true
			}
		}
	}
	var free []string
	for id, h := range k.health {
		if h == pluginapi.Healthy && !used[id] {
			free = append(free, id)
		}
	}
	sort.Strings(free)
	return free
}

func subset(ids, of []string) bool {
	set := make(map[string]bool, len(of))
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
