package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
)

// mainOn runs the whole tool, as the user types it, on a fake cluster.
func mainOn(t *testing.T, objs []runtime.Object, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runMainEnv(testEnv(t, &out, &errOut, objs...), args...)
	return out.String(), errOut.String(), code
}

// kubectl's habit: the global flags before the command.
func TestGlobalFlagsGoBeforeOrAfterTheCommand(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "team-b", "pod", "infer-0"},
		{"pod", "infer-0", "-n", "team-b"},
		{"--namespace=team-b", "-o", "json", "pod", "infer-0"},
		{"-o", "json", "pod", "-n", "team-b", "infer-0"},
	} {
		out, errOut, code := mainOn(t, cluster(t), args...)
		if code != 0 || !strings.Contains(out, "team-b") || !strings.Contains(out, "infer-0") || !strings.Contains(out, "GPU-a1") {
			t.Errorf("tessera %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	out, _, code := mainOn(t, cluster(t), "--no-headers", "-o", "wide", "nodes", "gpu-b")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "GPU-b0") || strings.Contains(out, "NODE") {
		t.Errorf("--no-headers -o wide nodes gpu-b: exit %d, want one row and no header:\n%s", code, out)
	}
}

func labelled(t *testing.T) []runtime.Object {
	objs := cluster(t)
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			n.Labels = map[string]string{"pool": "batch"}
			switch n.Name {
			case "gpu-a", "gpu-sick":
				n.Labels["accelerator"] = "a100"
			case "gpu-b":
				n.Labels["accelerator"] = "t4"
			}
		}
	}
	return objs
}

func nodeNames(t *testing.T, out string) []string {
	t.Helper()
	var l NodeCardsList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var names []string
	for _, n := range l.Items {
		names = append(names, n.Name)
	}
	return names
}

func TestNodesByNameAndLabelSelector(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nodes", "gpu-b", "gpu-a"}, "gpu-a gpu-b"},
		{[]string{"nodes", "-l", "accelerator=a100"}, "gpu-a gpu-sick"},
		{[]string{"nodes", "-l", "accelerator in (a100,t4),pool=batch"}, "gpu-a gpu-b gpu-sick"},
		{[]string{"nodes", "-l", "!accelerator"}, "cpu-1 gpu-old"},
		{[]string{"nodes", "gpu-a", "gpu-b", "--selector", "accelerator=t4"}, "gpu-b"},
		{[]string{"nodes", "-l", "accelerator=h100"}, ""},
	} {
		out := mustRun(t, labelled(t), c.args[0], append(c.args[1:], "-o", "json")...)
		if got := strings.Join(nodeNames(t, out), " "); got != c.want {
			t.Errorf("tessera %s: nodes %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	// kubectl's answers: the nodes it has, then an error for those it has not; and
	// "No resources found." on stderr for an empty table.
	out, errOut, err := run(t, labelled(t), "nodes", "gpu-a", "gpu-z")
	if err == nil || !strings.Contains(err.Error(), "nodes not found: gpu-z") || !strings.Contains(out, "gpu-a") || errors.Is(err, ErrUsage) {
		t.Errorf("a node that is none: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = run(t, labelled(t), "nodes", "-l", "accelerator=h100")
	if err != nil || out != "" || errOut != "No resources found.\n" {
		t.Errorf("no node matches: %v, stdout %q, stderr %q", err, out, errOut)
	}
}

const chartConf = `actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: gang
  - name: vgpu
    arguments:
      vgpu.HeartbeatTimeout: "0"
`

func chartConfigMap(ns, release string, conf string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release + "-scheduler-conf", Labels: map[string]string{
			"app.kubernetes.io/component": "scheduler", "app.kubernetes.io/name": "tessera", "helm.sh/chart": "tessera-0.2.0"}},
		Data: map[string]string{ConfKey: conf},
	}
}

// explain reads the running conf from the chart's ConfigMap, applies its vgpu arguments,
// and warns when queues can never take their cards back.
func TestExplainFindsTheSchedulersConfInTheCluster(t *testing.T) {
	objs := append(cluster(t), chartConfigMap("tessera-system", "gpu", chartConf),
		// Volcano's own conf, and a ConfigMap of another chart's scheduler: not Tessera's.
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "volcano-system", Name: "volcano-scheduler-configmap"},
			Data: map[string]string{ConfKey: "actions: allocate"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "other-scheduler-conf", Labels: map[string]string{
			"app.kubernetes.io/component": "scheduler", "helm.sh/chart": "other-1.0.0"}}, Data: map[string]string{ConfKey: "actions: allocate"}})
	out, errOut, err := run(t, objs, "explain", "big", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v Explanation
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.ConfSource != "ConfigMap tessera-system/gpu-scheduler-conf" {
		t.Errorf("confSource %q", v.ConfSource)
	}
	var lacks []string
	for _, f := range v.ConfFindings {
		if strings.Contains(f, "lack reclaim") || strings.Contains(f, "lack preempt") {
			lacks = append(lacks, f)
		}
	}
	if len(lacks) != 2 || !strings.Contains(lacks[0], "never takes back the cards other queues borrowed") {
		t.Errorf("findings %q, want the missing reclaim and preempt actions", v.ConfFindings)
	}
	for _, want := range []string{"warning: scheduler conf: actions \"enqueue, allocate, backfill\" lack reclaim", "lack preempt"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	fits := false
	for _, n := range v.Nodes {
		fits = fits || n.Node == "gpu-old" && n.Fits
	}
	if !fits {
		t.Errorf("the conf's vgpu.HeartbeatTimeout \"0\" was not applied: gpu-old, stale but idle, does not fit: %+v", v.Nodes)
	}
	text := mustRun(t, objs, "explain", "big")
	if !strings.Contains(text, "scheduler conf: read from ConfigMap tessera-system/gpu-scheduler-conf") || !strings.Contains(text, "lack reclaim") {
		t.Errorf("explain text does not say where the conf came from or what it lacks:\n%s", text)
	}
	// The conf the user names wins; a conf with both actions warns of neither.
	full := strings.Replace(chartConf, "backfill", "backfill, preempt, reclaim", 1)
	objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "sched"}, Data: map[string]string{ConfKey: full}})
	_, errOut, err = run(t, objs, "explain", "big", "--scheduler-configmap", "ops/sched")
	if err != nil || strings.Contains(errOut, "lack") {
		t.Errorf("named conf with preempt and reclaim: %v\n%s", err, errOut)
	}
	// nodes does not look for the conf: it keeps the plugin's defaults unless told.
	if _, errOut, _ := run(t, objs, "nodes"); strings.Contains(errOut, "scheduler conf") {
		t.Errorf("nodes read a conf it was not pointed at:\n%s", errOut)
	}
}

func TestExplainSaysWhyItUsedTheDefaults(t *testing.T) {
	for _, c := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"none", cluster(t), "no Tessera scheduler conf found"},
		{"two", append(cluster(t), chartConfigMap("a", "one", chartConf), chartConfigMap("b", "two", chartConf)),
			"2 Tessera scheduler confs found (a/one-scheduler-conf, b/two-scheduler-conf)"},
		{"without vgpu", append(cluster(t), chartConfigMap("a", "one", "actions: \"allocate, preempt, reclaim\"\ntiers: [{plugins: [{name: gang}]}]\n")),
			"does not enable the vgpu plugin"},
	} {
		_, errOut, err := run(t, c.objs, "explain", "big")
		if err != nil || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: %v; stderr lacks %q:\n%s", c.name, err, c.want, errOut)
		}
	}
}

func TestExplainWarnsWhenItMayNotLookForTheConf(t *testing.T) {
	var out, errOut bytes.Buffer
	env := testEnv(t, &out, &errOut)
	client := fake.NewSimpleClientset(cluster(t)...)
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("RBAC says no"))
	})
	env.Client = func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
		return client, "team-a", nil
	}
	if code := runMainEnv(env, "explain", "big"); code != 0 {
		t.Fatalf("explain failed: exit %d\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "warning: your account may not list ConfigMaps, so the scheduler's conf was not read") ||
		!strings.Contains(out.String(), "Pod team-a/big: no-node-fits") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}
