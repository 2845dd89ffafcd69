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
		inv.Cards = append(inv.Cards, api.Card{UUID: groupCardUUID(name, c), Index: c, Model: g.Model,
			MemoryMiB: g.MemoryMiB, NUMA: c * 2 / g.Cards, Shares: shares, Healthy: !slices.Contains(g.Unhealthy, c)})
	}
	return inventoryNode(name, inv, now)
}

// groupCardUUID is the UUID of card c of a node group's node.
func groupCardUUID(node string, c int) string { return fmt.Sprintf("GPU-%s-%d", node, c) }

// hostNode builds a host's Node.
func hostNode(h Host, now time.Time) (*corev1.Node, error) {
	n, err := inventoryNode(h.Name, &api.NodeInventory{Version: api.InventoryVersion, Cards: h.Cards}, now)
	if n != nil {
		n.Spec.Unschedulable = h.Unschedulable
	}
	return n, err
}

// inventoryNode is a ready node with CPU and memory to spare, the inventory and a
// fresh heartbeat, and as many vgpu-number slots as its cards have shares.
func inventoryNode(name string, inv *api.NodeInventory, now time.Time) (*corev1.Node, error) {
	s, err := api.EncodeInventory(inv)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	slots := 0
	for _, c := range inv.Cards {
		slots += c.Shares
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		api.ResourceNumber:    *resource.NewQuantity(int64(slots), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			api.AnnotationInventory: s, api.AnnotationHeartbeat: now.UTC().Format(time.RFC3339)}},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}, nil
}

// podGroup is what Volcano's job controller creates for a VolcanoJob: Pending, with
// the minimum members' resources, so that the enqueue action judges it. A job with
// bound members was admitted before: Running once they reach its minimum, else
// Inqueue.
func podGroup(j Job) *schedulingv1.PodGroup {
	min := corev1.ResourceList{}
	one := jobPod(j, 0, time.Time{}).Spec.Containers[0].Resources.Requests
	for name, q := range one {
		total := q.DeepCopy()
		total.Mul(int64(j.MinAvailable))
		min[name] = total
	}
	phase := schedulingv1.PodGroupPending
	switch {
	case len(j.Bound) > 0 && len(j.Bound) >= int(j.MinAvailable):
		phase = schedulingv1.PodGroupRunning
	case len(j.Bound) > 0:
		phase = schedulingv1.PodGroupInqueue
	}
	return &schedulingv1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.namespace()},
		Spec:       schedulingv1.PodGroupSpec{MinMember: j.MinAvailable, Queue: j.Queue, MinResources: &min},
		Status:     schedulingv1.PodGroupStatus{Phase: phase, Running: int32(len(j.Bound))},
	}
}

// jobPod is member i of the job, pending.
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
	name, ns := j.podName(i), j.namespace()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(ns + "-" + name),
			Annotations: ann, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{SchedulerName: "volcano", Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// boundPod is member i of the job running on its Bound cards, with the assignment
// the plugin would have written at bind time.
func boundPod(j Job, i int, created time.Time) (*corev1.Pod, error) {
	p := jobPod(j, i, created)
	m := j.Bound[i]
	qos, err := api.ParseQoSClass(j.Annotations[api.AnnotationQoS])
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", j.Key(), err)
	}
	s, err := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: m.Node, QoS: qos,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: m.Cards}}})
	if err != nil {
		return nil, fmt.Errorf("job %s: bound[%d]: %w", j.Key(), i, err)
	}
	p.Annotations[api.AnnotationAssignment] = s
	p.Spec.NodeName = m.Node
	p.Status.Phase = corev1.PodRunning
	return p, nil
}
