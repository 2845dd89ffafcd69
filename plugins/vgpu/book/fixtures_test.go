package book

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// testNode is a node of cards × 24 GiB of one model; card unhealthy (-1: none) is not.
func testNode(name, model string, cards int, unhealthy int) *placement.Node {
	inv := &api.NodeInventory{Version: "v1"}
	for i := 0; i < cards; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model,
			MemoryMiB: 24576, NUMA: -1, Shares: 10, Healthy: i != unhealthy})
	}
	return placement.NewNode(name, inv, 1)
}

func wholeCard() *placement.Request {
	return &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: 1, MemoryPercent: 100, Cores: 100}},
		CardPolicy: api.PolicyBinpack, NodePolicy: api.PolicyBinpack}
}

// kubeNode is a Node with room for many pods, for Volcano's NodeInfo.
func kubeNode(name string) *corev1.Node {
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: room, Capacity: room}}
}

// vgpuPod is a pod of one container asking for cards × (memMiB, cores) with the
// default resource names; node "" leaves it pending.
func vgpuPod(name, node string, cards, memMiB, cores int64) *corev1.Pod {
	limits := corev1.ResourceList{
		api.ResourceNumber: *resource.NewQuantity(cards, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(memMiB, resource.DecimalSI),
		api.ResourceCores:  *resource.NewQuantity(cores, resource.DecimalSI),
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}}}}}
	if node != "" {
		p.Status.Phase = corev1.PodRunning
	} else {
		p.Status.Phase = corev1.PodPending
	}
	return p
}

// assigned writes an assignment of card (memMiB, cores) on node onto the pod.
func assigned(p *corev1.Pod, node, card string, memMiB, cores int64) *corev1.Pod {
	p.Annotations[api.AnnotationAssignment] = fmt.Sprintf(
		`{"version":"v1","node":%q,"qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":%q,"memoryMiB":%d,"cores":%d}]}]}`,
		node, card, memMiB, cores)
	return p
}
