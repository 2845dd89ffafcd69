package charttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestDefaultValuesRenderEveryComponent(t *testing.T) {
	r := MustRender(t, "")
	// The scheduler, the agent and the admission webhook (on by default).
	want := map[string]int{
		"ConfigMap": 3, "Deployment": 2, "DaemonSet": 1, "Service": 3, "ServiceAccount": 3,
		// + the CLI viewer and card operator and the metrics reader roles
		"ClusterRole": 6, "ClusterRoleBinding": 3,
		// leader election and signing (scheduler), uninstall watch and assignment keys (agent),
		// the self-signed certificate's Secret (webhook)
		"Role": 5, "RoleBinding": 5,
		"PodDisruptionBudget": 1, "NetworkPolicy": 2,
		"ValidatingAdmissionPolicy": 5, "ValidatingAdmissionPolicyBinding": 5,
		"MutatingWebhookConfiguration": 1, "ValidatingWebhookConfiguration": 1,
	}
	got := r.WithoutHooks().Kinds()
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%d %s objects, want %d (rendered %v)", got[k], k, n, r.Names())
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected kind %s with default values", k)
		}
	}
	for _, o := range r.Objs {
		if o.GetLabels()["app.kubernetes.io/instance"] != "gpu" {
			t.Errorf("%s/%s lacks the instance label", o.GetKind(), o.GetName())
		}
		ns := o.GetNamespace()
		clusterScoped := o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding" ||
			strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") || strings.HasSuffix(o.GetKind(), "WebhookConfiguration")
		if clusterScoped != (ns == "") || (!clusterScoped && ns != "volcano-system") {
			t.Errorf("%s/%s has namespace %q", o.GetKind(), o.GetName(), ns)
		}
	}
}

// rule is one RBAC permission, flattened.
type rule struct{ group, resource, verb string }

func flatten(rules []rbacv1.PolicyRule) map[rule]bool {
	m := map[rule]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					m[rule{g, res, v}] = true
				}
			}
		}
	}
	return m
}

func TestTheNodeAgentMayOnlyPatchNodesWatchAndPatchPodsAndPostEvents(t *testing.T) {
	r := MustRender(t, "")
	var cr rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-vgpu-device-plugin", &cr)
	got := flatten(cr.Rules)
	want := map[rule]bool{
		// Writes kept to its own Node and that node's pods by the admission policies.
		{"", "nodes", "get"}: true, {"", "nodes", "list"}: true, {"", "nodes", "watch"}: true, {"", "nodes", "patch"}: true,
		{"", "pods", "get"}: true, {"", "pods", "list"}: true, {"", "pods", "watch"}: true, {"", "pods", "patch"}: true,
		{"", "events", "create"}: true, // its Node's events (another GPU device plugin on the node)
		// Guarded /metrics.
		{"authentication.k8s.io", "tokenreviews", "create"}: true, {"authorization.k8s.io", "subjectaccessreviews", "create"}: true,
	}
	for r := range got {
		if !want[r] {
			t.Errorf("agent may %s %q in group %q: more than it needs", r.verb, r.resource, r.group)
		}
	}
	for r := range want {
		if !got[r] {
			t.Errorf("agent may not %s %q: it needs to", r.verb, r.resource)
		}
	}
}

func TestTheSchedulerHasVolcanosPermissionsAndNoWildcardOrSecret(t *testing.T) {
	r := MustRender(t, "")
	var cr rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-scheduler", &cr)
	got := flatten(cr.Rules)
	for p := range got {
		if p.group == "*" || p.resource == "*" || p.verb == "*" {
			t.Errorf("wildcard permission %+v", p)
		}
		if p.resource == "secrets" {
			t.Errorf("scheduler may %s secrets", p.verb)
		}
		if p.resource == "leases" {
			t.Errorf("scheduler may %s leases cluster-wide; the Role grants them in its namespace", p.verb)
		}
	}
	// The facts the vgpu plugin and Volcano's cache depend on.
	for _, need := range []rule{
		{"", "pods/binding", "create"}, {"", "pods", "watch"}, {"", "pods", "get"}, {"", "pods/status", "update"},
		{"", "nodes", "list"}, {"", "nodes", "watch"}, {"", "events", "create"},
		{"scheduling.volcano.sh", "podgroups", "update"}, {"scheduling.volcano.sh", "queues", "list"},
		{"scheduling.volcano.sh", "queues/status", "update"},
		{"scheduling.k8s.io", "priorityclasses", "list"}, {"nodeinfo.volcano.sh", "numatopologies", "list"},
	} {
		if !got[need] {
			t.Errorf("scheduler may not %s %q in group %q", need.verb, need.resource, need.group)
		}
	}
	var role rbacv1.Role
	r.Get(t, "Role", "gpu-tessera-scheduler-leader-election", &role)
	lease := flatten(role.Rules)
	for _, v := range []string{"get", "create", "update"} {
		if !lease[rule{"coordination.k8s.io", "leases", v}] {
			t.Errorf("leader election needs leases %s", v)
		}
	}
	if len(lease) != 4 {
		t.Errorf("leader-election Role grants %d permissions, want 4: %v", len(lease), lease)
	}
	var rb rbacv1.RoleBinding
	r.Get(t, "RoleBinding", "gpu-tessera-scheduler-leader-election", &rb)
	if rb.Subjects[0].Name != "gpu-tessera-scheduler" || rb.RoleRef.Name != role.Name {
		t.Errorf("leader-election binding: %+v", rb)
	}
}

func TestBindingsNameTheirOwnServiceAccount(t *testing.T) {
	r := MustRender(t, "")
	for _, n := range []string{"gpu-tessera-scheduler", "gpu-tessera-vgpu-device-plugin"} {
		var b rbacv1.ClusterRoleBinding
		r.Get(t, "ClusterRoleBinding", n, &b)
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != n ||
			b.Subjects[0].Namespace != "volcano-system" || b.RoleRef.Name != n {
			t.Errorf("binding %s: subjects %+v roleRef %+v", n, b.Subjects, b.RoleRef)
		}
	}
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	if d.Spec.Template.Spec.ServiceAccountName != "gpu-tessera-scheduler" ||
		ds.Spec.Template.Spec.ServiceAccountName != "gpu-tessera-vgpu-device-plugin" {
		t.Errorf("service accounts: scheduler %q, agent %q", d.Spec.Template.Spec.ServiceAccountName, ds.Spec.Template.Spec.ServiceAccountName)
	}
}

func hostPaths(ds *appsv1.DaemonSet) map[string]string {
	m := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			m[v.Name] = v.HostPath.Path
		}
	}
	return m
}

func mounts(c *corev1.Container) map[string]corev1.VolumeMount {
	m := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		m[vm.Name] = vm
	}
	return m
}

// checkAgent asserts the DaemonSet mounts every host directory the agent's
// configuration names, at the same path, and gives the agent its node's name. The
// kubelet's pods directory is read-only and sees mounts the kubelet makes later.
func checkAgent(t *testing.T, r *Rendered, dpDir, podResDir, podsDir, stateDir, hookDir string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	hp := hostPaths(&ds)
	want := map[string]string{"device-plugins": dpDir, "pod-resources": podResDir, "kubelet-pods": podsDir, "state": stateDir, "hook-library": hookDir}
	for name, path := range want {
		if hp[name] != path {
			t.Errorf("hostPath volume %s = %q, want %q", name, hp[name], path)
		}
	}
	if len(hp) != len(want) {
		t.Errorf("hostPath volumes %v, want exactly %v", hp, want)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) < 1 || spec.Containers[0].Name != "vgpu-device-plugin" || len(spec.InitContainers) != 1 {
		t.Fatalf("%d containers, %d init containers", len(spec.Containers), len(spec.InitContainers))
	}
	for _, c := range spec.Containers[1:] {
		if c.Name != "hook-library-cleanup" {
			t.Errorf("unexpected container %s beside the agent", c.Name)
		}
	}
	agent := &spec.Containers[0]
	m := mounts(agent)
	for name, path := range want {
		if m[name].MountPath != path {
			t.Errorf("agent mounts %s at %q, want the host path %q", name, m[name].MountPath, path)
		}
	}
	if pods := m["kubelet-pods"]; !pods.ReadOnly || pods.MountPropagation == nil || *pods.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("agent mounts the kubelet's pods directory as %+v, want read-only with HostToContainer propagation", pods)
	}
	init := &spec.InitContainers[0]
	if im := mounts(init); im["hook-library"].MountPath != hookDir || im["hook-library"].ReadOnly {
		t.Errorf("init container mounts the hook directory as %+v", im["hook-library"])
	}
	if len(mounts(init)) != 1 {
		t.Errorf("init container mounts more than the hook directory: %v", mounts(init))
	}
	var nodeName bool
	for _, e := range agent.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Errorf("NODE_NAME is not taken from spec.nodeName: %+v", agent.Env)
	}
	for _, c := range append([]corev1.Container{*agent}, *init) {
		sc := c.SecurityContext
		if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s is privileged or may escalate: %+v", c.Name, sc)
		}
	}
	return &ds
}

func TestDefaultAgentMountsTheKubeletDirectoriesAndTheHookLibrary(t *testing.T) {
	r := MustRender(t, "")
	ds := checkAgent(t, r, "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pods", "/var/lib/tessera", "/usr/local/tessera/lib")
	spec := ds.Spec.Template.Spec
	if len(spec.NodeSelector) != 0 {
		t.Errorf("node selector %v: the default picks GPU nodes by node affinity alone", spec.NodeSelector)
	}
	var tolerates bool
	for _, tol := range spec.Tolerations {
		if tol.Key == "nvidia.com/gpu" && tol.Operator == corev1.TolerationOpExists {
			tolerates = true
		}
	}
	if !tolerates {
		t.Errorf("agent does not tolerate the nvidia.com/gpu taint: %+v", spec.Tolerations)
	}
	if got := strings.Join(spec.InitContainers[0].Command, " "); !strings.Contains(got, `mv -f "$DST.tmp" "$DST"`) {
		t.Errorf("init container does not install the library by rename: %s", got)
	}
}

func TestSchedulerDeploymentReadsTheGeneratedConf(t *testing.T) {
	r := MustRender(t, "")
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	c := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--scheduler-conf=/etc/volcano/volcano-scheduler.conf", "--scheduler-name=volcano",
		"--leader-elect=true", "--leader-elect-resource-namespace=volcano-system", "--listen-address=127.0.0.1:8081",
		"--tessera-metrics-auth-address=:8080", "--enable-metrics=true"} {
		if !strings.Contains(args, want) {
			t.Errorf("scheduler args lack %s: %s", want, args)
		}
	}
	if mounts(&c)["conf"].MountPath != "/etc/volcano" {
		t.Errorf("conf mounted at %q", mounts(&c)["conf"].MountPath)
	}
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", "gpu-tessera-scheduler-conf", &cm)
	if d.Spec.Template.Spec.Volumes[0].ConfigMap == nil || d.Spec.Template.Spec.Volumes[0].ConfigMap.Name != cm.Name {
		t.Errorf("conf volume does not name the ConfigMap %s", cm.Name)
	}
	if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("scheduler does not run as non-root")
	}
}

func TestCustomValuesReachEveryObject(t *testing.T) {
	r := MustRender(t, "testdata/custom-values.yaml")
	if got := r.Kinds(); got["ServiceMonitor"] != 2 || r.Has("Role", "gpu-tessera-scheduler-leader-election") {
		t.Errorf("kinds %v: want 2 ServiceMonitors and no leader-election Role", got)
	}
	checkAgent(t, r, "/data/kubelet/device-plugins", "/data/kubelet/pod-resources", "/data/kubelet/pods", "/data/tessera", "/opt/gpu/lib")
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	if ds.Spec.Template.Spec.RuntimeClassName == nil || *ds.Spec.Template.Spec.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName not set")
	}
	if ds.Spec.Template.Spec.NodeSelector["gpu"] != "a100" {
		t.Errorf("node selector %v", ds.Spec.Template.Spec.NodeSelector)
	}
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--scheduler-name=volcano", "--scheduler-name=gpu-batch", "--leader-elect=false", "-v=4", "--tessera-metrics-auth-address=:9090"} {
		if !strings.Contains(args, want) {
			t.Errorf("scheduler args lack %s: %s", want, args)
		}
	}
	if strings.Contains(args, "--leader-elect-resource-namespace") {
		t.Errorf("leader-election namespace set with leader election off")
	}
	if *d.Spec.Replicas != 1 || d.Spec.Template.Labels["team"] != "ml-platform" {
		t.Errorf("replicas %d, labels %v", *d.Spec.Replicas, d.Spec.Template.Labels)
	}
	for _, o := range r.Objs {
		if o.GetKind() == "ServiceMonitor" {
			if o.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("ServiceMonitor %s lacks the selector label", o.GetName())
			}
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			var matched bool
			for _, s := range r.Objs {
				if s.GetKind() == "Service" && subset(sel, s.GetLabels()) {
					matched = true
				}
			}
			if !matched {
				t.Errorf("ServiceMonitor %s selects no Service (%v)", o.GetName(), sel)
			}
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func TestEveryServiceSelectsItsPods(t *testing.T) {
	for _, values := range []string{"", "testdata/custom-values.yaml"} {
		r := MustRender(t, values)
		var d appsv1.Deployment
		r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
		var ds appsv1.DaemonSet
		r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
		if !subset(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) || !subset(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
			t.Errorf("%q: a workload's selector does not match its pod labels", values)
		}
		for _, n := range []struct{ svc, pods string }{{"gpu-tessera-scheduler-metrics", "scheduler"}, {"gpu-tessera-vgpu-device-plugin-metrics", "agent"}} {
			var s corev1.Service
			r.Get(t, "Service", n.svc, &s)
			labels := d.Spec.Template.Labels
			if n.pods == "agent" {
				labels = ds.Spec.Template.Labels
			}
			if !subset(s.Spec.Selector, labels) {
				t.Errorf("%q: service %s selects %v, pods carry %v", values, n.svc, s.Spec.Selector, labels)
			}
		}
	}
}

func TestTheChartRefusesVolcanoVGPUSharingAlongsideTessera(t *testing.T) {
	for _, f := range []string{"testdata/vgpuenable-tiers.yaml", "testdata/vgpuenable-override.yaml"} {
		_, err := Render(t, f, "volcano-system")
		if err == nil || !strings.Contains(err.Error(), "deviceshare.VGPUEnable") {
			t.Errorf("%s: render error %v, want a refusal naming deviceshare.VGPUEnable", f, err)
		}
	}
}

func TestValuesAndReadmeDocumentEachOther(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ChartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]interface{}
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(ChartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var leaves []string
	var walk func(prefix string, v interface{})
	walk = func(prefix string, v interface{}) {
		if m, ok := v.(map[string]interface{}); ok && len(m) > 0 && !freeForm[prefix] {
			for k, x := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		leaves = append(leaves, prefix)
	}
	walk("", vals)
	for _, l := range leaves {
		if !strings.Contains(string(readme), "`"+l+"`") {
			t.Errorf("README.md does not document value %s", l)
		}
	}
}

// freeForm values are maps the user fills; the README documents the map, not keys.
var freeForm = map[string]bool{
	"commonLabels": true, "scheduler.resources": true, "scheduler.podSecurityContext": true,
	"scheduler.securityContext": true, "devicePlugin.nodeSelector": true, "devicePlugin.resources": true,
	"devicePlugin.updateStrategy": true, "devicePlugin.securityContext": true, "serviceMonitor.labels": true,
	"scheduler.nodeSelector": true, "scheduler.affinity": true, "devicePlugin.affinity": true,
	"scheduler.livenessProbe": true, "scheduler.readinessProbe": true, "devicePlugin.livenessProbe": true,
	"devicePlugin.readinessProbe": true, "scheduler.serviceAccount.annotations": true,
	"devicePlugin.serviceAccount.annotations": true, "admission.resources": true,
	"admission.podSecurityContext": true, "admission.securityContext": true,
	"admission.nodeSelector": true, "admission.affinity": true, "admission.namespaceLabels": true,
	"admission.objectSelector": true, "admission.tls.certManager.issuerRef": true,
	"admission.serviceAccount.annotations": true, "devicePlugin.podSecurityContext": true,
	"metrics.networkPolicy.namespaceSelector": true, "metrics.networkPolicy.podSelector": true,
}
