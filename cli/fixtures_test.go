package cli

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/api"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func card(uuid string, index int, model string, mib int64) api.Card {
	return api.Card{UUID: uuid, Index: index, Model: model, MemoryMiB: mib, NUMA: 0, Shares: 4, Healthy: true}
}

func tesseraNode(t *testing.T, name string, heartbeat time.Time, cards ...api.Card) *corev1.Node {
	t.Helper()
	s, err := api.EncodeInventory(&api.NodeInventory{Version: api.InventoryVersion, Cards: cards})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		api.AnnotationInventory: s, api.AnnotationHeartbeat: heartbeat.Format(time.RFC3339)}}}
}

// vgpuPod is a pod with one container "main" asking for cards × mib × cores.
func vgpuPod(ns, name, queue string, cards, mib, cores int64) *corev1.Pod {
	lim := corev1.ResourceList{
		api.ResourceNumber: *resource.NewQuantity(cards, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(mib, resource.DecimalSI),
		api.ResourceCores:  *resource.NewQuantity(cores, resource.DecimalSI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{QueueKey: queue}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: lim}}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// placed binds p to node with the given cards, as the scheduler's Binding would.
func placed(t *testing.T, p *corev1.Pod, node string, qos api.QoSClass, handoff string, cards ...api.CardAssignment) *corev1.Pod {
	t.Helper()
	s, err := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: qos,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: cards}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	p.Annotations[api.AnnotationAssignment] = s
	p.Annotations[api.AnnotationAssignedAt] = fmt.Sprint(now.Add(-time.Minute).UnixNano())
	p.Annotations[api.AnnotationHandoff] = handoff
	return p
}

// cluster is five nodes that exercise every way a node can answer:
//
//	gpu-a    Tessera inventory, 2 × A100 40 GB: card 0 holds 30000 MiB / 50% (research),
//	         card 1 an exclusive tenant (prod)
//	gpu-b    HAMi registration, 1 × T4 15360 MiB, 4000 MiB / 20% taken through Volcano's grammar
//	gpu-old  heartbeat 10 minutes old
//	cpu-1    no cards
//	gpu-sick Tessera inventory, one unhealthy A100
func cluster(t *testing.T) []runtime.Object {
	a0, a1 := card("GPU-a0", 0, "NVIDIA A100-SXM4-40GB", 40960), card("GPU-a1", 1, "NVIDIA A100-SXM4-40GB", 40960)
	sick := card("GPU-s0", 0, "NVIDIA A100-SXM4-40GB", 40960)
	sick.Healthy = false
	hami := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-b", Annotations: map[string]string{
		api.VolcanoNodeRegister: "GPU-b0,4,15360,Tesla T4,true:"}}}
	b0 := vgpuPod("serving", "bert-0", "inference", 1, 4000, 20)
	b0.Spec.NodeName, b0.Status.Phase = "gpu-b", corev1.PodRunning
	b0.Annotations[api.VolcanoAssignedIDs] = "GPU-b0,NVIDIA,4000,20:"
	return []runtime.Object{
		tesseraNode(t, "gpu-a", now.Add(-10*time.Second), a0, a1),
		hami,
		tesseraNode(t, "gpu-old", now.Add(-10*time.Minute), card("GPU-o0", 0, "NVIDIA A100-SXM4-40GB", 40960)),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1"}},
		tesseraNode(t, "gpu-sick", now.Add(-5*time.Second), sick),
		placed(t, vgpuPod("team-a", "train-0", "research", 1, 30000, 50), "gpu-a", api.QoSFixedShare, api.HandoffDone,
			api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 30000, Cores: 50}),
		placed(t, vgpuPod("team-b", "infer-0", "prod", 1, 40960, 100), "gpu-a", api.QoSFixedShare, api.HandoffFailed,
			api.CardAssignment{UUID: "GPU-a1", MemoryMiB: 40960, Cores: 100}),
		b0,
		// Pending pods: one no node can take, one that fits on two nodes.
		vgpuPod("team-a", "big", "research", 1, 20000, 30),
		vgpuPod("team-a", "small", "research", 1, 8000, 20),
		// A pod without vGPU resources.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	}
}

func testEnv(t *testing.T, out, errOut *bytes.Buffer, objs ...runtime.Object) Env {
	client := fake.NewSimpleClientset(objs...)
	return Env{Stdout: out, Stderr: errOut, Now: func() time.Time { return now },
		Client: func(_ string, o *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			if o.Context.Namespace != "" { // -n, as clientcmd's Namespace() reads it
				return client, o.Context.Namespace, nil
			}
			return client, "team-a", nil
		}}
}
