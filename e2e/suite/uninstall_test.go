package suite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// logSince returns what the component logged after offset bytes.
func logSince(t *testing.T, name string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cl.LogDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

func logSize(name string) int64 {
	st, err := os.Stat(filepath.Join(cl.LogDir(), name+".log"))
	if err != nil {
		return 0
	}
	return st.Size()
}

// helm uninstall with a vGPU pod on one node. The chart's DaemonSet is deleted and the
// agents are stopped as the kubelets stop its pods: where the kubelet reports no pod
// holding a vGPU slot, the agent removes the hook library and empties its state directory
// (ld.so.preload, per-container directories); on the node whose pod still holds one, all of
// it stays, and the agent says which pod holds it.
func TestUninstallRemovesHostFilesOnlyWhereNoPodHoldsASlot(t *testing.T) {
	n := ns(t, "uninstall")
	defer cleanup(t, n)
	ctx := context.Background()
	dir := t.TempDir()
	helm := helmCLI{bin: cl.Opts.Bin.Helm, kubeconfig: cl.Kubeconfig, dir: dir}
	waitAllCardsFree(t)
	// What the chart's init container puts on each node (here the four nodes share one file).
	lib := cl.HookLibrary()
	if err := os.WriteFile(lib, []byte("libvgpu.so stand-in\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(lib)

	helm.run(t, append([]string{"install", release, helm.packageCurrent(t), "--namespace", releaseNS, "--create-namespace"}, harnessUsers()...)...)
	installed := true
	defer func() {
		if installed {
			helm.run(t, "uninstall", release, "--namespace", releaseNS, "--wait")
		}
		deleteReleaseNamespace(t)
		restoreHarness(t)
	}()
	// The harness's agents run under the harness release's account, not this release's:
	// bind them to the Role this release gives its own agents to watch their DaemonSet.
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "harness-agent-uninstall", Namespace: releaseNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: release + "-vgpu-device-plugin-uninstall"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: cluster.AgentAccount, Namespace: cluster.HarnessNamespace}}}
	if _, err := cl.Client.RbacV1().RoleBindings(releaseNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, agentConf := rollout(t, dir, currentVersion)
	if !strings.Contains(agentConf, "uninstallDaemonSet: \""+releaseNS+"/") {
		t.Fatalf("the chart's agent config does not name the agent's DaemonSet:\n%s", agentConf)
	}

	checkAgentMayWatchItsDaemonSet(t, agentConf)

	job := workload.Job(n, "l40s", "default", 1, workload.Task{Name: "t", Replicas: 1,
		Annotations: map[string]string{api.AnnotationGPUTypeInclude: "L40S"},
		Containers:  []workload.Container{{Name: "main", Cards: 1, MemPct: 20, Cores: 20}}})
	submit(t, job)
	pods, err := workload.WaitPods(ctx, cl.Client, n, job.Name, 2*time.Minute, workload.AllPhase(1, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkHandoff(t, pods)
	busy := pods[0].Spec.NodeName
	if busy != "gpu-d" {
		t.Fatalf("the L40S pod runs on %s, want gpu-d (the l40sx4 node)", busy)
	}
	for _, nd := range nodes {
		if _, err := os.Stat(filepath.Join(cl.StateDir(nd.Name), "ld.so.preload")); err != nil {
			t.Fatalf("before uninstall, node %s has no ld.so.preload: %v", nd.Name, err)
		}
	}
	offsets := map[string]int64{}
	for _, nd := range nodes {
		offsets[nd.Name] = logSize("agent-" + nd.Name)
	}

	helm.run(t, "uninstall", release, "--namespace", releaseNS, "--wait")
	installed = false
	cl.StopAgents()

	for _, nd := range nodes {
		state := cl.StateDir(nd.Name)
		entries, _ := os.ReadDir(state)
		logged := logSince(t, "agent-"+nd.Name, offsets[nd.Name])
		if nd.Name == busy {
			if _, err := os.Stat(filepath.Join(state, "ld.so.preload")); err != nil {
				t.Errorf("%s (pod %s holds a slot): ld.so.preload removed: %v", nd.Name, pods[0].Name, err)
			}
			if !strings.Contains(logged, "host files kept") || !strings.Contains(logged, n+"/"+pods[0].Name) {
				t.Errorf("%s's agent does not say it kept the files for %s/%s:\n%s", nd.Name, n, pods[0].Name, logged)
			}
			continue
		}
		if len(entries) > 0 {
			t.Errorf("%s (no vGPU pod): state directory still holds %d entries (%s...)", nd.Name, len(entries), entries[0].Name())
		}
		if !strings.Contains(logged, "host files removed") {
			t.Errorf("%s's agent does not say it removed the host files:\n%s", nd.Name, logged)
		}
	}
	if _, err := os.Stat(lib); err == nil {
		t.Errorf("hook library %s left although three of the nodes had no pod holding a slot", lib)
	}
}

// checkAgentMayWatchItsDaemonSet asks the API server's authorizer, through
// SubjectAccessReviews with the chart's RBAC in place, whether the agent's ServiceAccount
// may get, list and watch the DaemonSet the chart's config names (the informer lists and
// watches with a metadata.name field selector, which RBAC matches against resourceNames),
// and not another DaemonSet.
func checkAgentMayWatchItsDaemonSet(t *testing.T, agentConf string) {
	t.Helper()
	var named string
	for _, l := range strings.Split(agentConf, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "uninstallDaemonSet:"); ok {
			named = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	ns, name, _ := strings.Cut(named, "/")
	sa := "system:serviceaccount:" + ns + ":" + name // the chart names the agent's ServiceAccount as its DaemonSet
	for _, c := range []struct {
		verb, name string
		allowed    bool
	}{{"get", name, true}, {"list", name, true}, {"watch", name, true}, {"watch", "other", false}, {"delete", name, false}} {
		r, err := cl.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: c.verb, Group: "apps", Resource: "daemonsets", Name: c.name}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.allowed {
			t.Errorf("%s may %s daemonsets/%s: %t, want %t (%s)", sa, c.verb, c.name, r.Status.Allowed, c.allowed, r.Status.Reason)
		}
	}
}
