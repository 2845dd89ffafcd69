package fakekubelet

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Admit adds the pod to the kubelet's table and allocates devices to each container
// that requests the resource, in spec order, as the device manager does. It returns the
// plugin's answer per container name. A failed pod stays in the table without devices,
// as a rejected pod does.
func (k *Kubelet) Admit(ctx context.Context, pod *corev1.Pod) (map[string]*pluginapi.ContainerAllocateResponse, error) {
	k.admission.Lock()
	defer k.admission.Unlock()
	k.mu.Lock()
	k.pods = append(k.pods, pod)
	k.mu.Unlock()
	plugin, opts, err := k.client()
	if err != nil {
		return nil, err
	}
	out := map[string]*pluginapi.ContainerAllocateResponse{}
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[corev1.ResourceName(k.Resource)]
		if !ok || q.Value() == 0 {
			continue
		}
		ids, err := k.choose(ctx, plugin, opts, int(q.Value()))
		if err != nil {
			return nil, err
		}
		start := time.Now()
		resp, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIDs: ids}}})
		k.mu.Lock()
		k.lastAllocate = time.Since(start)
		k.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("allocate container %q: %w", c.Name, err)
		}
		k.mu.Lock()
		if k.devices[string(pod.UID)] == nil {
			k.devices[string(pod.UID)] = map[string][]string{}
		}
		k.devices[string(pod.UID)][c.Name] = ids
		k.mu.Unlock()
		out[c.Name] = resp.ContainerResponses[0]
	}
	return out, nil
}

// choose asks for a preferred allocation among the free healthy slots and falls back
// to the first free slots when the answer is unusable, like the device manager.
func (k *Kubelet) choose(ctx context.Context, plugin pluginapi.DevicePluginClient, opts *pluginapi.DevicePluginOptions, n int) ([]string, error) {
	k.mu.Lock()
	used := map[string]bool{}
	for _, cs := range k.devices {
		for _, ids := range cs {
			for _, id := range ids {
				used[id] = true
			}
		}
	}
	free := map[string]bool{}
	for id, h := range k.health {
		if h == pluginapi.Healthy && !used[id] {
			free[id] = true
		}
	}
	k.mu.Unlock()
	if len(free) < n {
		return nil, fmt.Errorf("requested number of devices unavailable: requested %d, available %d", n, len(free))
	}
	available := sortedKeys(free)
	if opts.GetPreferredAllocationAvailable && !k.IgnorePreferred {
		resp, err := plugin.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: available, AllocationSize: int32(n)}}})
		if err != nil {
			return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
		}
		if ids := resp.ContainerResponses[0].DeviceIDs; len(ids) == n && allIn(ids, free) {
			return ids, nil
		}
	}
	return available[:n], nil
}

func allIn(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}

// StartContainers calls PreStartContainer for each container holding devices, in spec order.
func (k *Kubelet) StartContainers(ctx context.Context, pod *corev1.Pod) error {
	plugin, opts, err := k.client()
	if err != nil {
		return err
	}
	if !opts.PreStartRequired {
		return nil
	}
	for _, c := range pod.Spec.Containers {
		ids := k.Devices(pod, c.Name)
		if ids == nil {
			continue
		}
		if _, err := plugin.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIDs: ids}); err != nil {
			return fmt.Errorf("container %q: device plugin PreStartContainer rpc failed with err: %w", c.Name, err)
		}
	}
	return nil
}

// Devices returns the slot IDs the kubelet recorded for a container.
func (k *Kubelet) Devices(pod *corev1.Pod, container string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.devices[string(pod.UID)][container]...)
}

// Remove forgets a pod and frees its devices, as after the pod is deleted.
func (k *Kubelet) Remove(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.devices, string(pod.UID))
	for i, p := range k.pods {
		if p.UID == pod.UID {
			k.pods = append(k.pods[:i], k.pods[i+1:]...)
			break
		}
	}
}

type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	k *Kubelet
}

func (p *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k := p.k
	k.mu.Lock()
	defer k.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, pod := range k.pods {
		pr := &podresourcesv1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
		for _, c := range pod.Spec.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			if ids := k.devices[string(pod.UID)][c.Name]; len(ids) > 0 {
				sorted := append([]string(nil), ids...)
				sort.Strings(sorted)
				cr.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: k.Resource, DeviceIds: sorted}}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}

// LastAllocate is how long the last Allocate call took, round trip.
func (k *Kubelet) LastAllocate() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastAllocate
}
