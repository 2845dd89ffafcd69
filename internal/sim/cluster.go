package sim

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
)

const namespace = "sim"

// gpuNode builds a Node as Tessera's node agent would leave it: inventory,
// heartbeat and vgpu-number slots.
func gpuNode(g NodeGroup, i int, now time.Time) (*corev1.Node, error) {
	name := fmt.Sprintf("%s-%d", g.Prefix, i)
	shares := g.Shares
	if shares == 0 {
		shares = 10
	}
	inv := &api.NodeInventory{Version: api.InventoryVersion}
	for c := 0; c < g.Cards; c++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%s-%d", name, c), Index: c, Model: g.Model,
			MemoryMiB: g.MemoryMiB, NUMA: c * 2 / g.Cards, Shares: shares, Healthy: !slices.Contains(g.Unhealthy, c)})
	}
	s, err := api.EncodeInventory(inv)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		api.ResourceNumber:    *resource.NewQuantity(int64(g.Cards*shares), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			api.AnnotationInventory: s, api.AnnotationHeartbeat: now.UTC().Format(time.RFC3339)}},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}, nil
}

// podGroup is what Volcano's job controller creates for a VolcanoJob: Pending, with
// the minimum members' resources, so that the enqueue action judges it.
func podGroup(j Job) *schedulingv1.PodGroup {
	min := corev1.ResourceList{}
	one := jobPod(j, 0, time.Time{}).Spec.Containers[0].Resources.Requests
	for name, q := range one {
		total := q.DeepCopy()
		total.Mul(int64(j.MinAvailable))
		min[name] = total
	}
	return &schedulingv1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: namespace},
		Spec:       schedulingv1.PodGroupSpec{MinMember: j.MinAvailable, Queue: j.Queue, MinResources: &min},
		Status:     schedulingv1.PodGroupStatus{Phase: schedulingv1.PodGroupPending},
	}
}

func jobPod(j Job, i int, created time.Time) *corev1.Pod {
	lim := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		api.ResourceNumber:    *resource.NewQuantity(j.Cards, resource.DecimalSI),
	}
	if j.MemoryMiB > 0 {
		lim[api.ResourceMemory] = *resource.NewQuantity(j.MemoryMiB, resource.DecimalSI)
	}
	if j.MemoryPct > 0 {
		lim[api.ResourceMemoryPercentage] = *resource.NewQuantity(j.MemoryPct, resource.DecimalSI)
	}
	if j.Cores > 0 {
		lim[api.ResourceCores] = *resource.NewQuantity(j.Cores, resource.DecimalSI)
	}
	ann := map[string]string{schedulingv1.KubeGroupNameAnnotationKey: j.Name}
	for k, v := range j.Annotations {
		ann[k] = v
	}
	name := fmt.Sprintf("%s-%d", j.Name, i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(namespace + "-" + name),
			Annotations: ann, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{SchedulerName: "volcano", Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}
