package charttest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
	kubeconfig, client, ns := realAPIServer(t, "cli-test-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	var list cli.NodeCardsList
	if err := json.Unmarshal(run("nodes"), &list); err != nil {
		t.Fatal(err)
	}
	if list.APIVersion != cli.APIVersion || list.Kind != cli.KindNodeCardsList {
		t.Errorf("nodes -o json is %s %s, want %s %s", list.APIVersion, list.Kind, cli.APIVersion, cli.KindNodeCardsList)
	}
	nodes := list.Items
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

// A user who may only read pods in one namespace, against the API server's real RBAC,
// reached with kubectl's --as (the admin impersonates) and with --server/--token: the pod
// view works with a warning, the Node views name what is missing, -A fails, and binding
// the chart's viewer ClusterRole makes the Node views work.
func TestCLIForANamespaceReaderAgainstRealRBAC(t *testing.T) {
	kubeconfig, client, ns := realAPIServer(t, "cli-reader-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	user := "reader-" + ns
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"}}, metav1.CreateOptions{})
	mustCreate(err)
	a, _ := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: "somewhere", QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-reader-0", MemoryMiB: 1000, Cores: 10}}}}})
	lim := corev1.ResourceList{api.ResourceNumber: resource.MustParse("1")}
	_, err = client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns,
		Annotations: map[string]string{api.AnnotationAssignment: a}},
		Spec: corev1.PodSpec{NodeName: "somewhere", Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}}}}}, metav1.CreateOptions{})
	mustCreate(err)

	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		env := cli.DefaultEnv()
		env.Stdout, env.Stderr = &out, &errOut
		err := cli.Run(ctx, env, args[0], append(args[1:], "--kubeconfig", kubeconfig, "--as", user, "-n", ns))
		return out.String(), errOut.String(), err
	}
	out, errOut, err := run("pod", "mine", "-o", "json")
	if err != nil || !strings.Contains(out, "GPU-reader-0") || !strings.Contains(errOut, "partial view") {
		t.Errorf("tessera pod as %s: %v\nstdout %s\nstderr %s", user, err, out, errOut)
	}
	if _, _, err := run("nodes"); err == nil || !strings.Contains(err.Error(), "may not list") || !strings.Contains(err.Error(), user) {
		t.Errorf("tessera nodes as %s: %v; want the API server's Forbidden for the user, explained", user, err)
	}
	if _, _, err := run("pod", "mine", "-A"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("tessera pod -A as %s: %v; want forbidden", user, err)
	}

	// The chart's viewer role, bound to the user, opens the Node views.
	r := MustRender(t, "")
	var viewer rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-viewer", &viewer)
	viewer.Name = "tessera-viewer-" + ns
	_, err = client.RbacV1().ClusterRoles().Create(ctx, &viewer, metav1.CreateOptions{})
	mustCreate(err)
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), viewer.Name, metav1.DeleteOptions{})
	})
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: viewer.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: viewer.Name}}, metav1.CreateOptions{})
	mustCreate(err)
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), viewer.Name, metav1.DeleteOptions{})
	})
	deadline := time.Now().Add(10 * time.Second) // RBAC's authorizer cache catches up
	for {
		_, errOut, err := run("nodes", "-A", "-o", "yaml")
		if err == nil && !strings.Contains(errOut, "partial view") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tessera nodes -A with the viewer role: %v\n%s", err, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Without a kubeconfig's user: --server and --token, as kubectl takes them.
	raw, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var server string
	for _, c := range raw.Clusters {
		server = c.Server
	}
	empty := filepath.Join(t.TempDir(), "empty-kubeconfig")
	mustCreate(os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	var out2, errOut2 bytes.Buffer
	env := cli.DefaultEnv()
	env.Stdout, env.Stderr = &out2, &errOut2
	if err := cli.Run(ctx, env, "pod", []string{"mine", "-n", ns, "--kubeconfig", empty, "-s", server, "--token", "chart-test-token",
		"--insecure-skip-tls-verify", "-o", "json"}); err != nil || !strings.Contains(out2.String(), "GPU-reader-0") {
		t.Errorf("tessera pod with --server/--token: %v\n%s%s", err, out2.String(), errOut2.String())
	}
}

// realAPIServer is the API server the switches name (an existing cluster's kubeconfig,
// or etcd + kube-apiserver started here), its admin client and a fresh namespace.
func realAPIServer(t *testing.T, nsPrefix string) (string, kubernetes.Interface, string) {
	t.Helper()
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
	ns := nsPrefix + time.Now().Format("150405")
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, client, ns
}
