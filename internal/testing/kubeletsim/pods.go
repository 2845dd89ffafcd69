package kubeletsim

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PreStart calls PreStartContainer with the slots recorded for the container, when it
// holds any and the plugin asks for the call.
func (k *Kubelet) PreStart(ctx context.Context, pod *corev1.Pod, container string) error {
	ids := k.Devices(pod, container)
	if len(ids) == 0 {
		return nil
	}
	plugin, opts, err := k.pluginClient(ctx, k.opts.PluginWait > 0)
	if err != nil {
		return err
	}
	if !opts.PreStartRequired {
		return nil
	}
	if _, err := plugin.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids}); err != nil {
		return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
	}
	return nil
}

// StartContainers calls PreStart for each container, in spec order.
func (k *Kubelet) StartContainers(ctx context.Context, pod *corev1.Pod) error {
	for _, c := range pod.Spec.Containers {
		if err := k.PreStart(ctx, pod, c.Name); err != nil {
			return fmt.Errorf("container %q: %w", c.Name, err)
		}
	}
	return nil
}

// Devices returns the slot IDs recorded for a container.
func (k *Kubelet) Devices(pod *corev1.Pod, container string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.holders[pod.UID][container]...)
}

// LoseAllocation models the real kubelet's device accounting dropping a pod it is
// still setting up (seen under churn with kubelet v1.34): its slots count as free for
// the next admission while PodResources goes on reporting them as the pod's, so two
// containers end up recorded on one slot.
func (k *Kubelet) LoseAllocation(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lost[uid] = true
}

// Release forgets a pod and frees its slots, as after the pod terminates or is deleted.
func (k *Kubelet) Release(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.holders, uid)
	delete(k.lost, uid)
	for i, p := range k.pods {
		if p.UID == uid {
			k.pods = append(k.pods[:i], k.pods[i+1:]...)
			break
		}
	}
}

var _ podresourcesv1.PodResourcesListerServer = (*podResources)(nil)

type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	k *Kubelet
}

// List reports the active pods and, per container, the slot IDs recorded for it, one
// entry per slot as the kubelet (v1.34) reports them. The IDs are sorted, not in
// allocation order: the kubelet promises no order either.
func (p *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k := p.k
	k.mu.Lock()
	defer k.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, pod := range k.pods {
		pr := &podresourcesv1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
		for _, c := range pod.Spec.Containers {
			cr := &podresourcesv1.ContainerResources{Name: c.Name}
			if ids := k.holders[pod.UID][c.Name]; len(ids) > 0 {
				sorted := append([]string(nil), ids...)
				sort.Strings(sorted)
				for _, id := range sorted {
					cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: k.opts.Resource, DeviceIds: []string{id}})
				}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}
