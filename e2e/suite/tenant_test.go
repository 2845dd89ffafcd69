package suite

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// A tenant is a user with Kubernetes' edit role in its own namespace and nothing more
// (impersonated here, under the API server's real RBAC). With the chart's admission
// policies in place it tries what a hostile tenant would; every attempt is refused,
// naming what it touched. Then the policies are removed, as on a cluster where someone
// deleted them, and the forged pod reaches a node: the node agent refuses it on its own,
// and the other tenant's pod and card are untouched.
func TestTenantAttacks(t *testing.T) {
	ctx := context.Background()
	attacker, victimNS := ns(t, "tenant-a"), ns(t, "tenant-b")
	defer func() {
		for _, n := range []string{attacker, victimNS} {
			_ = cl.Client.CoreV1().Pods(n).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{})
			cleanup(t, n)
		}
	}()
	waitAllCardsFree(t)
	tenant := tenantClient(t, attacker)
	policies := applyAdmissionPolicies(t)

	victim := tenantPod(victimNS, "victim", "")
	if _, err := cl.Client.CoreV1().Pods(victimNS).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim = waitHandedOff(t, victimNS, "victim")
	vAsg, err := api.DecodeAssignment(victim.Annotations[api.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	card := vAsg.Containers[0].Cards[0].UUID
	t.Logf("the victim holds %s on %s", card, victim.Spec.NodeName)

	forged := func(name string) *corev1.Pod {
		p := tenantPod(attacker, name, victim.Spec.NodeName)
		p.Annotations = map[string]string{api.AnnotationAssignment: fmt.Sprintf(
			`{"version":"v1","node":%q,"qos":"best-effort","containers":[{"name":"main","cards":[{"uuid":%q,"memoryMiB":1048576,"cores":100}]}]}`,
			victim.Spec.NodeName, card)}
		return p
	}
	refused := []struct {
		name string
		pod  func() *corev1.Pod
		want string
	}{
		{"a vGPU pod created on a node, past the scheduler", func() *corev1.Pod { return tenantPod(attacker, "on-node", victim.Spec.NodeName) }, "spec.nodeName"},
		{"a pod carrying its own card assignment", func() *corev1.Pod {
			p := forged("forged")
			p.Spec.NodeName = ""
			return p
		}, api.AnnotationAssignment},
		{"a vGPU container that sets vgpu-core's variables", func() *corev1.Pod {
			p := tenantPod(attacker, "env", "")
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TESSERA_LIMITS_FILE", Value: "/dev/null"}, {Name: "TESSERA_MEMORY_LIMIT_MIB", Value: "0"}}
			return p
		}, "TESSERA_LIMITS_FILE"},
	}
	for _, r := range refused {
		_, err := tenant.CoreV1().Pods(attacker).Create(ctx, r.pod(), metav1.CreateOptions{})
		if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: err = %v, want a refusal naming %s", r.name, err, r.want)
			continue
		}
		t.Logf("refused %s: %v", r.name, err)
	}

	// Its own pod, placed by Tessera: the tenant may not raise what it was given.
	own := tenantPod(attacker, "own", "")
	if _, err := tenant.CoreV1().Pods(attacker).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant's ordinary vGPU pod: %v", err)
	}
	own = waitHandedOff(t, attacker, "own")
	raised := strings.Replace(own.Annotations[api.AnnotationAssignment], `"memoryMiB":1024`, `"memoryMiB":80000`, 1)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.AnnotationAssignment, raised)
	_, err = tenant.CoreV1().Pods(attacker).Patch(ctx, "own", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), api.AnnotationAssignment) {
		t.Errorf("patching its own pod's assignment: err = %v, want a refusal naming %s", err, api.AnnotationAssignment)
	}

	// The node agent's account may write only its own Node and the pods bound to it, and
	// only its own annotations there: what a compromised node could do to the others.
	agentAttacks(t, victim)

	// The victim's node agent names every pod on the node in its metrics: the tenant may
	// not read them, with or without its own account's token.
	metricsAttacks(t, attacker, "the agent's", cl.AgentMetricsURL(victim.Spec.NodeName), "tessera_container_")
	// So does the scheduler's, with every queue and card: the same guard in front of it.
	metricsAttacks(t, attacker, "the scheduler's", cl.SchedulerGuardedMetricsURL(), "tessera_scheduler_")

	// A filter list sized to cost the scheduler minutes a session is refused as a reason,
	// not evaluated: the pod stays unplaced.
	costly := tenantPod(attacker, "costly", "")
	costly.Annotations = map[string]string{api.AnnotationGPUTypeExclude: strings.TrimSuffix(strings.Repeat("z,", 87381), ",")}
	if _, err := tenant.CoreV1().Pods(attacker).Create(ctx, costly, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod with a long filter list is the scheduler's to refuse: %v", err)
	}

	// The policies gone: the forged pod reaches the node, whose agent refuses it.
	for _, name := range policies {
		if err := cl.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var p *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err = tenant.CoreV1().Pods(attacker).Create(ctx, forged("past-the-policy"), metav1.CreateOptions{})
		return err == nil, nil // the API server drops a deleted binding within seconds
	})
	if err != nil {
		t.Fatalf("the forged pod was never created once the policies were removed: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err = cl.Client.CoreV1().Pods(attacker).Get(ctx, "past-the-policy", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("the forged pod is %s (%s: %s), want it refused by the node", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	if !strings.Contains(p.Status.Message, "not signed") {
		t.Errorf("the forged pod failed with %q: %q, want the agent's reason (not signed)", p.Status.Reason, p.Status.Message)
	}
	t.Logf("the node refused the forged pod: %s: %s", p.Status.Reason, p.Status.Message)

	after, err := cl.Client.CoreV1().Pods(victimNS).Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Phase != corev1.PodRunning || after.Annotations[api.AnnotationAssignment] != victim.Annotations[api.AnnotationAssignment] {
		t.Errorf("the victim is %s with assignment %s, was Running with %s", after.Status.Phase,
			after.Annotations[api.AnnotationAssignment], victim.Annotations[api.AnnotationAssignment])
	}
	// The scheduler says why, each session, on the pod.
	c := &corev1.Pod{}
	said := func() bool {
		for _, cond := range c.Status.Conditions {
			if cond.Type == corev1.PodScheduled && strings.Contains(cond.Message, api.AnnotationGPUTypeExclude) {
				return true
			}
		}
		return false
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cl.Client.CoreV1().Pods(attacker).Get(ctx, "costly", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c = got
		return c.Spec.NodeName != "" || said(), nil
	})
	if err != nil || c.Spec.NodeName != "" {
		t.Errorf("the pod with an 87,381-entry filter list: node %q, conditions %v; want it unplaced with a reason naming %s",
			c.Spec.NodeName, c.Status.Conditions, api.AnnotationGPUTypeExclude)
	}
	for _, cond := range c.Status.Conditions {
		t.Logf("costly pod: %s=%s %s", cond.Type, cond.Status, cond.Message)
	}
	noOvercommit(t)
}

// tenantPod is a one-container vGPU pod for Volcano (1 card, 1 GiB, 10% of its SMs),
// on node when node is set.
func tenantPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		SchedulerName: "volcano", NodeName: node, TerminationGracePeriodSeconds: ptr(int64(0)),
		Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "infinity"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("1"),
				api.ResourceMemory: resource.MustParse("1024"), api.ResourceCores: resource.MustParse("10")}}}}}}
}

// tenantClient acts as user tenant-<ns>, bound to the edit ClusterRole in ns only.
func tenantClient(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	user := "tenant-" + ns
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := cl.Client.RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cl.Rest)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The role exists and the tenant cannot reach beyond its namespace.
	if _, err := c.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant lists kube-system's pods: err = %v, want forbidden", err)
	}
	return c
}

// applyAdmissionPolicies applies the chart's admission policies for the test.
func applyAdmissionPolicies(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	p, err := cl.ApplyAdmissionPolicies(ctx, chartDir)
	if p != nil {
		t.Cleanup(func() { p.Remove(ctx, cl) })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admission policies enforced: %v", p.Bindings)
	return p.Bindings
}

// waitHandedOff waits until the pod runs with its handoff done.
func waitHandedOff(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = cl.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Annotations[api.AnnotationHandoff] == api.HandoffDone, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v (phase %s, handoff %q %q)", ns, name, err, p.Status.Phase, p.Annotations[api.AnnotationHandoff], p.Annotations[api.AnnotationHandoffMessage])
	}
	return p
}

// agentAttacks acts as the node agent of a node other than the victim's, under the chart's
// agent account and RBAC (the harness runs its agents under them) and with the node claim
// its pod-bound token carries.
func agentAttacks(t *testing.T, victim *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	nodes, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim := ""
	for _, n := range nodes.Items {
		if n.Name != victim.Spec.NodeName {
			claim = n.Name
			break
		}
	}
	cfg := rest.CopyConfig(cl.Rest)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: cluster.AgentUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + cluster.HarnessNamespace, "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/node-name": {claim}}}
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	annotate := func(key, value string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value))
	}
	now := time.Now().UTC().Format(time.RFC3339)
	// Allowed, so that the refusals below are the policy's and not a missing permission.
	if _, err := agent.CoreV1().Nodes().Patch(ctx, claim, types.MergePatchType, annotate(api.AnnotationHeartbeat, now), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the agent of %s writing its own heartbeat: %v", claim, err)
	}
	refused := []struct {
		name string
		do   func() error
	}{
		{"another node's inventory", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, victim.Spec.NodeName, types.MergePatchType, annotate(api.AnnotationInventory, "{}"), metav1.PatchOptions{})
			return err
		}},
		{"a label on its own node", func() error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, claim, types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e-tessera":"x"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"the handoff of a pod on another node", func() error {
			_, err := agent.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.MergePatchType, annotate(api.AnnotationHandoffMessage, "x"), metav1.PatchOptions{})
			return err
		}},
		{"an assignment", func() error {
			_, err := agent.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.MergePatchType, annotate(api.AnnotationAssignment, "{}"), metav1.PatchOptions{})
			return err
		}},
	}
	for _, r := range refused {
		err := r.do()
		if err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("the agent of %s: %s: err = %v, want the admission policy's refusal", claim, r.name, err)
			continue
		}
		t.Logf("the agent of %s refused %s: %v", claim, r.name, err)
	}
}

// metricsAttacks scrapes a component's guarded /metrics (url) as the tenant would:
// without a token, and with a token of a ServiceAccount of its own namespace (edit there,
// as the tenant has). Both are refused; the admin's token reads them (series starting with
// series), so the refusals are the guard's.
func metricsAttacks(t *testing.T, ns, whose, url, series string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper", Namespace: ns}}
	if _, err := cl.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper-edit", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}}}
	if _, err := cl.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cl.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"the tenant's ServiceAccount token", tr.Status.Token, http.StatusForbidden}} {
		if code, body := scrape(c.token); code != c.want || strings.Contains(body, series) {
			t.Errorf("%s /metrics with %s: %d, want %d (body %.200q)", whose, c.who, code, c.want, body)
		} else {
			t.Logf("%s /metrics with %s: %d", whose, c.who, code)
		}
	}
	if code, body := scrape(cl.Rest.BearerToken); code != http.StatusOK || !strings.Contains(body, series) {
		t.Errorf("%s /metrics with the admin's token: %d, want 200 with the %s series (body %.200q)", whose, code, series, body)
	}
}
