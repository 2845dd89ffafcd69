package charttest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
)

// The viewer role reads; the card operator role adds exactly what cordon, uncordon and
// drain write: a Node patch and pod evictions (and the reads drain makes). Neither may
// delete a pod outright, which would pass over PodDisruptionBudgets.
func TestTheCardOperatorRoleMayCordonAndEvictAndTheViewerMayNot(t *testing.T) {
	r := MustRender(t, "")
	var viewer, operator rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-viewer", &viewer)
	r.Get(t, "ClusterRole", "gpu-tessera-card-operator", &operator)
	want := map[rule]bool{
		{"", "nodes", "get"}: true, {"", "nodes", "list"}: true, {"", "nodes", "patch"}: true,
		{"", "pods", "get"}: true, {"", "pods", "list"}: true, {"", "pods/eviction", "create"}: true,
	}
	got := flatten(operator.Rules)
	for p := range got {
		if !want[p] {
			t.Errorf("the card operator may %s %q in group %q: more than cordon and drain need", p.verb, p.resource, p.group)
		}
	}
	for p := range want {
		if !got[p] {
			t.Errorf("the card operator may not %s %q: cordon or drain needs it", p.verb, p.resource)
		}
	}
	for p := range flatten(viewer.Rules) {
		if p.verb != "get" && p.verb != "list" && p.verb != "watch" {
			t.Errorf("the viewer may %s %q", p.verb, p.resource)
		}
	}
	// kubectl tessera nodes reads the claims on DRA nodes.
	if !flatten(viewer.Rules)[rule{"resource.k8s.io", "resourceclaims", "list"}] {
		t.Error("the viewer may not list ResourceClaims: DRA nodes' cards would show unknown")
	}
	r, err := RenderValues(t, "rbac: {cardOperatorRole: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Has("ClusterRole", "gpu-tessera-card-operator") {
		t.Error("rbac.cardOperatorRole: false still renders the role")
	}
}

// Against a real API server and its RBAC: a user with the chart's viewer role may not
// cordon; with the card operator role beside it, cordon writes the annotation through a
// merge patch guarded by the resourceVersion, and drain evicts through the Eviction API,
// which a PodDisruptionBudget holds (the drain times out naming the pod); once the
// budget is gone, drain evicts the pod and waits until it is gone.
func TestCordonAndDrainAgainstARealAPIServer(t *testing.T) {
	kubeconfig, client, ns := realAPIServer(t, "cli-cordon-")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := "cordon-gpu-" + ns
	inv, _ := api.EncodeInventory(&api.NodeInventory{Version: api.InventoryVersion, Cards: []api.Card{
		{UUID: "GPU-cordon-0", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMA: 0, Shares: 4, Healthy: true},
		{UUID: "GPU-cordon-1", Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMA: 0, Shares: 4, Healthy: true}}})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{
		api.AnnotationInventory: inv, api.AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}}}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	a, _ := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-cordon-1", MemoryMiB: 1000, Cores: 10}}}}})
	lim := corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"), api.ResourceMemory: resource.MustParse("1000")}
	_, err = client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: ns,
		Labels: map[string]string{"app": "holder"}, Annotations: map[string]string{api.AnnotationAssignment: a}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}}}}}, metav1.CreateOptions{})
	must(err)
	// Running and ready: the Eviction API passes over budgets for pods not yet running,
	// and (by default) for pods not ready while the budget is met.
	holder, err := client.CoreV1().Pods(ns).Get(ctx, "holder", metav1.GetOptions{})
	must(err)
	holder.Status.Phase = corev1.PodRunning
	holder.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = client.CoreV1().Pods(ns).UpdateStatus(ctx, holder, metav1.UpdateOptions{})
	must(err)

	user := "operator-" + ns
	bind := func(role string) {
		t.Helper()
		var cr rbacv1.ClusterRole
		MustRender(t, "").Get(t, "ClusterRole", role, &cr)
		cr.Name = role + "-" + ns
		_, err := client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{})
		must(err)
		_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}}, metav1.CreateOptions{})
		must(err)
		t.Cleanup(func() {
			_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), cr.Name, metav1.DeleteOptions{})
			_ = client.RbacV1().ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{})
		})
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		env := cli.DefaultEnv()
		env.Stdout, env.Stderr = &out, &errOut
		err := cli.Run(ctx, env, args[0], append(args[1:], "--kubeconfig", kubeconfig, "--as", user))
		return out.String() + errOut.String(), err
	}
	bind("gpu-tessera-viewer")
	waitFor(t, func() bool { _, err := run("nodes", node); return err == nil })
	if _, err := run("cordon", node, "0"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the viewer cordoned a card: %v", err)
	}
	bind("gpu-tessera-card-operator")
	waitFor(t, func() bool { _, err := run("cordon", node, "0", "--reason", "ECC errors"); return err == nil })
	if out, err := run("nodes", node); err != nil || !strings.Contains(out, "cordoned: ECC errors") {
		t.Errorf("nodes after cordon: %v\n%s", err, out)
	}

	_, err = client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "keep"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "holder"}}}}, metav1.CreateOptions{})
	must(err)
	// The disruption controller's part: the budget is processed, and allows no disruption.
	pdb, err := client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "keep", metav1.GetOptions{})
	must(err)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	_, err = client.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	must(err)
	out, err := run("drain", node, "GPU-cordon-1", "--timeout", "3s")
	if err == nil || !strings.Contains(err.Error(), ns+"/holder: not evicted, refused or told to retry later until the timeout: Cannot evict pod as it would violate the pod's disruption budget") {
		t.Fatalf("drain under a PodDisruptionBudget: %v\n%s", err, out)
	}
	if _, err := client.CoreV1().Pods(ns).Get(ctx, "holder", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod the budget protects is gone: %v", err)
	}
	must(client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "keep", metav1.DeleteOptions{}))
	go finishTerminating(ctx, client, ns, "holder") // no kubelet here: play its part
	out, err = run("drain", node, "1", "--timeout", "30s")
	if err != nil || !strings.Contains(out, "evicting "+ns+"/holder (card 1 (GPU-cordon-1))") || !strings.Contains(out, ns+"/holder is gone") {
		t.Fatalf("drain without the budget: %v\n%s", err, out)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(err)
	c, err := api.DecodeCordons(n.Annotations[api.AnnotationCordonedCards])
	if err != nil || len(c.Cards) != 2 || c.Cards["GPU-cordon-0"].Reason != "ECC errors" {
		t.Errorf("cordons after drain: %+v (%v), want both cards, card 0 with its reason", c, err)
	}
	if _, err := run("uncordon", node, "0", "1"); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if _, ok := n.Annotations[api.AnnotationCordonedCards]; ok {
		t.Errorf("uncordon of every card left the annotation: %s", n.Annotations[api.AnnotationCordonedCards])
	}
}

// finishTerminating deletes the pod for good once its deletion has begun, as the
// kubelet does when its containers have stopped.
func finishTerminating(ctx context.Context, client kubernetes.Interface, ns, name string) {
	for ctx.Err() == nil {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return
		}
		if p.DeletionTimestamp != nil {
			zero := int64(0)
			_ = client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls cond for ten seconds (RBAC's authorizer cache catches up with bindings).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
