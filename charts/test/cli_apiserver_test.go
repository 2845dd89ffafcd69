package charttest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
)

// The CLI through its real client path (kubeconfig loading, the pod field selector
// the API server evaluates) against a real API server, with the same switches as
// the dry-run test.
func TestCLIReadsARealAPIServer(t *testing.T) {
	kubeconfig := os.Getenv(EnvDryRunKubeconfig)
	if kubeconfig == "" {
		apiserver := os.Getenv(EnvKubeAPIServer)
		if apiserver == "" {
			t.Skip("SKIPPED: needs a real API server: set " + EnvDryRunKubeconfig + " or " + EnvKubeAPIServer)
		}
		kubeconfig = startControlPlane(t, apiserver)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := "cli-test-" + time.Now().Format("150405")
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inv, _ := api.EncodeInventory(&api.NodeInventory{Version: api.InventoryVersion, Cards: []api.Card{
		{UUID: "GPU-cli-0", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMA: 0, Shares: 4, Healthy: true}}})
	node := "cli-gpu-" + ns
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{
		api.AnnotationInventory: inv, api.AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	pod := func(name string, mib int64, assigned bool) {
		lim := corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"),
			api.ResourceMemory: *resource.NewQuantity(mib, resource.DecimalSI), api.ResourceCores: resource.MustParse("30")}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{cli.QueueKey: "research"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}}}}}
		if assigned {
			a, _ := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: api.QoSFixedShare,
				Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-cli-0", MemoryMiB: mib, Cores: 30}}}}})
			p.Annotations[api.AnnotationAssignment] = a
			p.Spec.NodeName = node
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("running", 30000, true)
	pod("waiting", 20000, false)

	run := func(args ...string) []byte {
		t.Helper()
		var out, errOut bytes.Buffer
		env := cli.DefaultEnv()
		env.Stdout, env.Stderr = &out, &errOut
		if err := cli.Run(ctx, env, args[0], append(args[1:], "--kubeconfig", kubeconfig, "-n", ns, "-o", "json")); err != nil {
			t.Fatalf("tessera %v: %v\n%s", args, err, errOut.String())
		}
		return out.Bytes()
	}
	var nodes []cli.NodeView
	if err := json.Unmarshal(run("nodes"), &nodes); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, n := range nodes {
		if n.Name == node {
			found = true
			if n.Status != cli.StatusReady || len(n.Cards) != 1 || n.Cards[0].UsedMemoryMiB != 30000 || len(n.Cards[0].Pods) != 1 {
				t.Errorf("node view: %+v", n)
			}
		}
	}
	if !found {
		t.Fatalf("node %s missing from %+v", node, nodes)
	}
	var ex cli.ExplainView
	if err := json.Unmarshal(run("explain", "waiting"), &ex); err != nil {
		t.Fatal(err)
	}
	found = false
	for _, n := range ex.Nodes {
		if n.Node == node {
			found = true
			if n.Fits || n.Reason != `vgpu: container "main" needs 1 cards, 0 of 1 fit (1 insufficient memory)` {
				t.Errorf("explain on %s: %+v", node, n)
			}
		}
	}
	if !found || ex.Status != cli.ExplainNoNodeFits {
		t.Errorf("explain: status %s, node %s listed %v", ex.Status, node, found)
	}
}
