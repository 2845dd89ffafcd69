package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// uninstallKeepsRunningContainers uninstalls Tessera from both real-runtime nodes while
// the probe pod on gpu-r1 runs, as `helm uninstall` does it: the agents' DaemonSet is
// deleted, then the agents are stopped. gpu-r1's agent finds pods holding its slots
// through the kubelet and keeps every host file (ld.so.preload, the limits files), saying
// which pods hold them; the containers' processes run on, the hook library still mapped,
// their limits files still in place. gpu-r2, whose probe job was deleted first, is left
// with an empty state directory and no hook library. The agents are started again
// (without the DaemonSet) afterwards, for the rest of the scenario's clean-up.
func uninstallKeepsRunningContainers(t *testing.T, namespace string, running corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	const ds = "tessera-agent-uninstall"
	// The DaemonSet stands for the chart's (it selects no node: the harness runs the
	// agents); the harness's agent account may watch it, as the chart's Role allows.
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{ds},
		Verbs: []string{"get", "list", "watch"}}}
	if _, err := cl.Client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ds}, Rules: rules},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ds},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ds},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: cluster.AgentAccount, Namespace: cluster.HarnessNamespace}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": ds}
	if _, err := cl.Client.AppsV1().DaemonSets(namespace).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ds},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"tessera.io/no-such-node": "true"},
				Containers: []corev1.Container{{Name: "agent", Image: cluster.ProbeImage}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// gpu-r2 is emptied of vGPU pods first: the jobs of every pod on it are deleted.
	onR2, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-r2"})
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]bool{}
	for _, p := range onR2.Items {
		jobs[p.Labels["volcano.sh/job-name"]] = true
	}
	for j := range jobs {
		if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, j, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete job %q of a pod on gpu-r2: %v", j, err)
		}
	}
	var left []string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=gpu-r2"})
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, p := range ps.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("the pods on gpu-r2 did not go after their jobs %v were deleted: %v left", jobs, left)
	}
	// On the host each node has its own hook library; here the nodes share one file, so
	// gpu-r2's agent gets a copy of its own to remove.
	lib2 := filepath.Join(filepath.Dir(cl.HookLibrary()), "libvgpu-gpu-r2.so")
	b, err := os.ReadFile(cl.HookLibrary())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib2, b, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(lib2)
	flag := "--uninstall-daemonset=" + namespace + "/" + ds
	offsets := map[string]int64{}
	for node, extra := range map[string][]string{"gpu-r1": {flag}, "gpu-r2": {flag, "--hook-library=" + lib2}} {
		cl.StopAgent(node)
		offsets[node] = logSize("agent-" + node)
		if err := cl.StartAgent(ctx, node, extra...); err != nil {
			t.Fatal(err)
		}
	}
	for node := range offsets {
		if err := cl.WaitNodeReady(ctx, node, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		// As on a node where the agent has run a while: its watch of the DaemonSet has
		// synced before the chart is removed.
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.Contains(logSince(t, "agent-"+node, offsets[node]), "Watching the agent's DaemonSet"), nil
		}); err != nil {
			t.Fatalf("%s's agent never started watching its DaemonSet:\n%s", node, lastLines(logSince(t, "agent-"+node, offsets[node]), 20))
		}
	}
	// The processes of the pod that keeps running, with their start times.
	h := handed(t)
	type live struct {
		pid   int
		start string
	}
	procs := map[string]live{}
	for _, c := range running.Spec.Containers {
		r, ok := h.Records[string(running.UID)+"/"+c.Name]
		if !ok {
			t.Fatalf("%s/%s: no record from the runtime", running.Name, c.Name)
		}
		pid, err := containerProcess(r.ID, cluster.ProbePath)
		if err != nil {
			t.Fatal(err)
		}
		procs[c.Name] = live{pid, processStart(pid)}
	}
	start := time.Now()
	if err := cl.Client.AppsV1().DaemonSets(namespace).Delete(ctx, ds, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for node := range offsets {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.Contains(logSince(t, "agent-"+node, offsets[node]), "The agent's DaemonSet is being removed"), nil
		}); err != nil {
			t.Fatalf("%s's agent never saw its DaemonSet deleted", node)
		}
		cl.StopAgent(node)
	}
	t.Logf("DaemonSet deleted and both real-runtime agents stopped in %s", time.Since(start).Round(100*time.Millisecond))

	kept := logSince(t, "agent-gpu-r1", offsets["gpu-r1"])
	if !strings.Contains(kept, "host files kept") || !strings.Contains(kept, namespace+"/"+running.Name) {
		t.Errorf("gpu-r1's agent does not say it kept the host files for %s/%s:\n%s", namespace, running.Name, lastLines(kept, 20))
	}
	if _, err := os.Stat(filepath.Join(cl.StateDir("gpu-r1"), "ld.so.preload")); err != nil {
		t.Errorf("gpu-r1 (pod %s runs): ld.so.preload removed: %v", running.Name, err)
	}
	for name, l := range procs {
		if processStart(l.pid) != l.start {
			t.Errorf("%s/%s: its process %d did not outlive the uninstall", running.Name, name, l.pid)
			continue
		}
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", l.pid))
		if err != nil || !strings.Contains(string(maps), cl.HookLibrary()) {
			t.Errorf("%s/%s: the hook library is no longer mapped in process %d after the uninstall: %v", running.Name, name, l.pid, err)
		}
	}
	a, err := api.DecodeAssignment(running.Annotations[api.AnnotationAssignment])
	if err != nil {
		t.Fatal(err)
	}
	for _, ca := range a.Containers {
		f := filepath.Join(cl.StateDir("gpu-r1"), "pods", string(running.UID), ca.Name, "limits.env")
		if _, err := os.Stat(f); err != nil {
			t.Errorf("gpu-r1: the limits file of %s/%s is gone after the uninstall: %v", running.Name, ca.Name, err)
		}
	}
	removed := logSince(t, "agent-gpu-r2", offsets["gpu-r2"])
	if !strings.Contains(removed, "host files removed") {
		t.Errorf("gpu-r2's agent does not say it removed the host files:\n%s", lastLines(removed, 20))
	}
	if entries, _ := os.ReadDir(cl.StateDir("gpu-r2")); len(entries) > 0 {
		t.Errorf("gpu-r2 (no vGPU pod): its state directory still holds %d entries (%s...)", len(entries), entries[0].Name())
	}
	if _, err := os.Stat(lib2); err == nil {
		t.Errorf("gpu-r2 (no vGPU pod): its hook library %s is still there", lib2)
	}
	t.Logf("uninstalled under %s: gpu-r1 kept its files and %d processes ran on with the library mapped; gpu-r2 was emptied",
		running.Name, len(procs))

	for node := range offsets {
		if err := cl.StartAgent(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	for node := range offsets {
		if err := cl.WaitNodeReady(ctx, node, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := workload.WaitPods(ctx, cl.Client, namespace, running.Labels["volcano.sh/job-name"], time.Minute,
		workload.AllPhase(1, corev1.PodRunning)); err != nil {
		t.Errorf("%s after the agents came back: %v", running.Name, err)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
