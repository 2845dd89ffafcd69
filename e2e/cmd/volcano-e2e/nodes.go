package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tessera-gpu/tessera/e2e/internal/scale"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// NodeShape is the size of each simulated worker node.
type NodeShape struct {
	Count       int
	CPU, Memory resource.Quantity
}

// WorkerNode is worker i as Volcano's CI creates its kwok nodes (hack/run-e2e-kind.sh),
// without the taint it puts on them: Volcano's suites size their jobs from the
// allocatable CPU of the untainted nodes and skip tainted ones.
func WorkerNode(i int, shape NodeShape) *corev1.Node {
	name := fmt.Sprintf("kwok-node-%d", i)
	res := corev1.ResourceList{corev1.ResourceCPU: shape.CPU, corev1.ResourceMemory: shape.Memory,
		corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent",
				"node-role.kubernetes.io/agent": "", "type": "kwok"},
			Annotations: map[string]string{scale.KwokAnnotation: scale.KwokValue, "node.alpha.kubernetes.io/ttl": "0"}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux"}},
	}
}

// CreateWorkers creates the worker nodes and waits until kwok has made every one Ready
// and the node lifecycle controller has lifted its not-ready taint.
func CreateWorkers(ctx context.Context, c kubernetes.Interface, shape NodeShape, timeout time.Duration) error {
	for i := 0; i < shape.Count; i++ {
		n := WorkerNode(i, shape)
		// The API server drops a new Node's status: patch capacity and allocatable in.
		status, err := json.Marshal(map[string]any{"status": map[string]any{
			"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable}})
		if err != nil {
			return err
		}
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if _, err := c.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 &&
					n.Status.Allocatable.Cpu().Cmp(shape.CPU) == 0 {
					ready++
				}
			}
		}
		if ready >= shape.Count {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d kwok nodes Ready, untainted and of %s CPU after %s", ready, shape.Count, shape.CPU.String(), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
