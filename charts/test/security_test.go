package charttest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func args(c corev1.Container) string { return strings.Join(c.Args, " ") }

func schedulerContainer(t *testing.T, r *Rendered) corev1.Container {
	t.Helper()
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	return d.Spec.Template.Spec.Containers[0]
}

// rulesOf flattens a Role's rules with their resource names.
func rulesOf(rules []rbacv1.PolicyRule) map[string]bool {
	m := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					m[g+"/"+res+" "+v+" "+strings.Join(r.ResourceNames, ",")] = true
				}
			}
		}
	}
	return m
}

func sameSet(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	for k := range got {
		if !want[k] {
			t.Errorf("%s grants %s: more than needed", what, k)
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s lacks %s", what, k)
		}
	}
}

// The agent pod: the runtime's seccomp profile, the library every vGPU container preloads,
// the kubelet's PodResources directory and its pods directory read-only, every capability
// dropped (the agent adds back CAP_KILL only: TestTheAgentMayKillOnlyWhenItsMemoryGuardEnforces).
func TestTheAgentPodIsHardened(t *testing.T) {
	spec := agentPod(t, MustRender(t, ""))
	if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("agent pod security context %+v, want seccomp RuntimeDefault", spec.SecurityContext)
	}
	agent := spec.Containers[0]
	m := mounts(&agent)
	for _, v := range []string{"pod-resources", "kubelet-pods", "hook-library", "config"} {
		if !m[v].ReadOnly {
			t.Errorf("the agent mounts %s writable", v)
		}
	}
	for _, v := range []string{"device-plugins", "state"} { // its socket; per-container directories
		if m[v].ReadOnly {
			t.Errorf("the agent mounts %s read-only: it writes there", v)
		}
	}
	// Only the init container writes the library, by copy and rename.
	if im := mounts(&spec.InitContainers[0]); im["hook-library"].ReadOnly {
		t.Error("the init container cannot install the library")
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: security context %+v", c.Name, sc)
		}
	}
}

// image.digest pins every container that runs the image, the init and cleanup
// containers, the helm test pod and the webhook (the scheduler's image) included.
func TestImagesCanBePinnedByDigest(t *testing.T) {
	const sd = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	const ad = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	r, err := RenderValues(t, "scheduler:\n  image: {digest: "+sd+", tag: ignored}\ndevicePlugin:\n  image: {digest: "+ad+"}\nadmission: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c := schedulerContainer(t, r); c.Image != "ghcr.io/tessera-gpu/vc-scheduler@"+sd {
		t.Errorf("scheduler image %s", c.Image)
	}
	spec := agentPod(t, r)
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Image != "ghcr.io/tessera-gpu/vgpu-device-plugin@"+ad {
			t.Errorf("%s image %s", c.Name, c.Image)
		}
	}
	var p corev1.Pod
	r.Get(t, "Pod", "gpu-tessera-test", &p)
	if p.Spec.Containers[0].Image != "ghcr.io/tessera-gpu/vgpu-device-plugin@"+ad {
		t.Errorf("helm test image %s", p.Spec.Containers[0].Image)
	}
	var w appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-admission", &w)
	if img := w.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/tessera-gpu/vc-scheduler@"+sd {
		t.Errorf("webhook image %s, want the scheduler's by digest", img)
	}
	for _, bad := range []string{"scheduler:\n  image: {digest: latest}\n", "devicePlugin:\n  image: {digest: \"sha256:abc\"}\n"} {
		if _, err := RenderValues(t, bad); err == nil || !strings.Contains(err.Error(), "digest") {
			t.Errorf("values %q: err %v, want a schema error naming digest", bad, err)
		}
	}
}

// Guarded /metrics: Volcano's server on loopback behind the scheduler's proxy, the agent
// with --metrics-auth, both allowed to ask the API server, a reader role for Prometheus,
// ServiceMonitors that send Prometheus's token, and the probes unchanged.
func TestMetricsAreGuardedByDefault(t *testing.T) {
	r := MustRender(t, "testdata/monitoring-values.yaml")
	sched := schedulerContainer(t, r)
	if a := args(sched); !strings.Contains(a, "--listen-address=127.0.0.1:8081") || !strings.Contains(a, "--tessera-metrics-auth-address=:8080") {
		t.Errorf("scheduler args %s", a)
	}
	if sched.Ports[0].ContainerPort != 8080 || sched.LivenessProbe.HTTPGet.Port.StrVal != "healthz" {
		t.Errorf("scheduler ports %+v, probe %+v", sched.Ports, sched.LivenessProbe.HTTPGet)
	}
	agent := agentPod(t, r).Containers[0]
	if !strings.Contains(args(agent), "--metrics-auth=kubernetes") {
		t.Errorf("agent args %s", args(agent))
	}
	var reader rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-metrics-reader", &reader)
	if len(reader.Rules) != 1 || strings.Join(reader.Rules[0].NonResourceURLs, ",") != "/metrics" ||
		strings.Join(reader.Rules[0].Verbs, ",") != "get" || len(reader.Rules[0].Resources) != 0 {
		t.Errorf("metrics reader rules %+v", reader.Rules)
	}
	for _, o := range r.Objs {
		if o.GetKind() != "ServiceMonitor" {
			continue
		}
		eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
		if f, _, _ := unstructured.NestedString(eps[0].(map[string]interface{}), "bearerTokenFile"); f != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
			t.Errorf("ServiceMonitor %s sends no bearer token: %v", o.GetName(), eps[0])
		}
	}
	// Off: as before.
	r, err := RenderValues(t, "metrics: {authentication: false}\nserviceMonitor: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	if a := args(schedulerContainer(t, r)); !strings.Contains(a, "--listen-address=:8080") || strings.Contains(a, "tessera-metrics-auth") {
		t.Errorf("unguarded scheduler args %s", a)
	}
	if a := args(agentPod(t, r).Containers[0]); strings.Contains(a, "metrics-auth") {
		t.Errorf("unguarded agent args %s", a)
	}
	for _, n := range []string{"gpu-tessera-scheduler", "gpu-tessera-vgpu-device-plugin"} {
		var cr rbacv1.ClusterRole
		r.Get(t, "ClusterRole", n, &cr)
		if flatten(cr.Rules)[rule{"authentication.k8s.io", "tokenreviews", "create"}] {
			t.Errorf("%s may create TokenReviews with metrics unguarded", n)
		}
	}
	for _, o := range r.Objs {
		if o.GetKind() == "ServiceMonitor" && strings.Contains(toString(o.Object), "bearerTokenFile") {
			t.Errorf("ServiceMonitor %s sends a token to an unguarded endpoint", o.GetName())
		}
	}
}

func toString(v interface{}) string {
	var b strings.Builder
	var walk func(interface{})
	walk = func(v interface{}) {
		switch x := v.(type) {
		case map[string]interface{}:
			for k, y := range x {
				b.WriteString(k + " ")
				walk(y)
			}
		case []interface{}:
			for _, y := range x {
				walk(y)
			}
		default:
			b.WriteString(" ")
		}
	}
	walk(v)
	return b.String()
}

// `helm test` reads the guarded /metrics with a token of its own ServiceAccount, bound
// to the reader role for the test only; the probe it asks stays open.
func TestHelmTestReadsGuardedMetricsWithItsOwnToken(t *testing.T) {
	r := MustRender(t, "")
	var p corev1.Pod
	r.Get(t, "Pod", "gpu-tessera-test", &p)
	var sa corev1.ServiceAccount
	r.Get(t, "ServiceAccount", "gpu-tessera-test", &sa)
	var b rbacv1.ClusterRoleBinding
	r.Get(t, "ClusterRoleBinding", "gpu-tessera-test-metrics", &b)
	if p.Spec.ServiceAccountName != sa.Name || b.RoleRef.Name != "gpu-tessera-metrics-reader" || b.Subjects[0].Name != sa.Name {
		t.Errorf("test pod runs as %q; binding %+v", p.Spec.ServiceAccountName, b)
	}
	for _, o := range []interface{ GetAnnotations() map[string]string }{&sa, &b} {
		if a := o.GetAnnotations(); a["helm.sh/hook"] != "test" || a["helm.sh/hook-weight"] != "-1" {
			t.Errorf("test RBAC annotations %v: want a test hook created before the pod", a)
		}
	}
	if s := p.Spec.Containers[0].Args[0]; !strings.Contains(s, `--header "$auth"`) || !strings.Contains(s, "serviceaccount/token") {
		t.Errorf("test script does not send a token:\n%s", s)
	}
	r, err := RenderValues(t, "metrics: {authentication: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Has("ServiceAccount", "gpu-tessera-test") {
		t.Error("a test ServiceAccount with metrics unguarded")
	}
	r.Get(t, "Pod", "gpu-tessera-test", &p)
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("the test pod mounts a token it does not use")
	}
}

// Only the scrapers (and the helm test pod) reach the metrics ports; nothing else
// reaches the scheduler or the agents.
func TestNetworkPoliciesAdmitOnlyTheScrapers(t *testing.T) {
	r, err := RenderValues(t, "metrics:\n  networkPolicy:\n    namespaceSelector: {matchLabels: {team: observability}}\n    podSelector: {matchLabels: {app: prometheus}}\n")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	for name, c := range map[string]struct {
		labels map[string]string
		port   int32
	}{"gpu-tessera-scheduler-metrics": {d.Spec.Template.Labels, 8080}, "gpu-tessera-device-plugin-metrics": {ds.Spec.Template.Labels, 9394}} {
		var np networkingv1.NetworkPolicy
		r.Get(t, "NetworkPolicy", name, &np)
		if !subset(np.Spec.PodSelector.MatchLabels, c.labels) || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
			t.Errorf("%s selects %v (pods carry %v), types %v", name, np.Spec.PodSelector.MatchLabels, c.labels, np.Spec.PolicyTypes)
		}
		if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntVal != c.port {
			t.Fatalf("%s ingress %+v, want one rule on port %d", name, np.Spec.Ingress, c.port)
		}
		from := np.Spec.Ingress[0].From
		if len(from) != 2 || from[0].NamespaceSelector.MatchLabels["team"] != "observability" || from[0].PodSelector.MatchLabels["app"] != "prometheus" ||
			from[1].NamespaceSelector != nil || from[1].PodSelector.MatchLabels["app.kubernetes.io/component"] != "test" {
			t.Errorf("%s admits %+v", name, from)
		}
	}
	var p corev1.Pod
	r.Get(t, "Pod", "gpu-tessera-test", &p)
	var np networkingv1.NetworkPolicy
	r.Get(t, "NetworkPolicy", "gpu-tessera-scheduler-metrics", &np)
	if !subset(np.Spec.Ingress[0].From[1].PodSelector.MatchLabels, p.Labels) {
		t.Errorf("the helm test pod (%v) is not admitted", p.Labels)
	}
	if k := MustRender(t, "").Kinds(); k["NetworkPolicy"] != 2 {
		t.Errorf("%d NetworkPolicies by default", k["NetworkPolicy"])
	}
	r, err = RenderValues(t, "metrics:\n  networkPolicy: {enabled: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Kinds()["NetworkPolicy"] != 0 {
		t.Error("networkPolicy.enabled=false still renders NetworkPolicies")
	}
}

// Assignment signing: the scheduler's flags and its Role on the one Secret and the one
// ConfigMap; the agent's read of that ConfigMap alone.
func TestSigningKeysAreTheSchedulersAndTheAgentsReadOnlyThePublicOnes(t *testing.T) {
	r := MustRender(t, "")
	a := args(schedulerContainer(t, r))
	for _, want := range []string{"--tessera-signing-secret=volcano-system/gpu-tessera-assignment-signing",
		"--tessera-signing-keys-configmap=volcano-system/gpu-tessera-assignment-keys"} {
		if !strings.Contains(a, want) {
			t.Errorf("scheduler args lack %s: %s", want, a)
		}
	}
	var role rbacv1.Role
	r.Get(t, "Role", "gpu-tessera-scheduler-signing", &role)
	if role.Namespace != "volcano-system" {
		t.Errorf("signing Role in %s", role.Namespace)
	}
	sameSet(t, "the scheduler's signing Role", rulesOf(role.Rules), map[string]bool{
		"/secrets create ": true, "/secrets get gpu-tessera-assignment-signing": true, "/secrets update gpu-tessera-assignment-signing": true,
		"/configmaps create ": true, "/configmaps get gpu-tessera-assignment-keys": true, "/configmaps update gpu-tessera-assignment-keys": true,
	})
	var rb rbacv1.RoleBinding
	r.Get(t, "RoleBinding", "gpu-tessera-scheduler-signing", &rb)
	if rb.Subjects[0].Name != "gpu-tessera-scheduler" || rb.RoleRef.Name != role.Name {
		t.Errorf("signing RoleBinding %+v", rb)
	}
	r.Get(t, "Role", "gpu-tessera-vgpu-device-plugin-assignment-keys", &role)
	sameSet(t, "the agent's keys Role", rulesOf(role.Rules), map[string]bool{
		"/configmaps get gpu-tessera-assignment-keys": true, "/configmaps list gpu-tessera-assignment-keys": true,
		"/configmaps watch gpu-tessera-assignment-keys": true,
	})
	r.Get(t, "RoleBinding", "gpu-tessera-vgpu-device-plugin-assignment-keys", &rb)
	if rb.Subjects[0].Name != "gpu-tessera-vgpu-device-plugin" || rb.Subjects[0].Namespace != "volcano-system" {
		t.Errorf("keys RoleBinding %+v", rb)
	}
	var cr rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-vgpu-device-plugin", &cr)
	for p := range flatten(cr.Rules) {
		if p.resource == "secrets" || p.resource == "configmaps" {
			t.Errorf("the agent may %s %s cluster-wide", p.verb, p.resource)
		}
	}

	// Keys elsewhere: the agent's Role follows them; signing off: no flags, no Role.
	r, err := RenderValues(t, "devicePlugin:\n  config: {assignmentKeys: gpu-system/keys, unsignedAssignments: allow}\nscheduler:\n  signing: {enabled: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	r.Get(t, "Role", "gpu-tessera-vgpu-device-plugin-assignment-keys", &role)
	if role.Namespace != "gpu-system" || role.Rules[0].ResourceNames[0] != "keys" {
		t.Errorf("keys Role %s/%v", role.Namespace, role.Rules[0].ResourceNames)
	}
	if a := args(schedulerContainer(t, r)); strings.Contains(a, "signing") || r.Has("Role", "gpu-tessera-scheduler-signing") {
		t.Errorf("signing off: args %s, Role rendered %v", a, r.Has("Role", "gpu-tessera-scheduler-signing"))
	}
	for _, bad := range []string{"devicePlugin:\n  config: {unsignedAssignments: warn}\n", "devicePlugin:\n  config: {assignmentKeys: keys}\n"} {
		if _, err := RenderValues(t, bad); err == nil {
			t.Errorf("values %q accepted", bad)
		}
	}
}

// The agent's config names the keys and refuses unsigned assignments by default.
func TestTheAgentConfigNamesTheKeysAndRefusesUnsignedAssignments(t *testing.T) {
	var cm corev1.ConfigMap
	MustRender(t, "").Get(t, "ConfigMap", "gpu-tessera-vgpu-device-plugin-config", &cm)
	conf := cm.Data["device-plugin.yaml"]
	for _, want := range []string{`assignmentKeys: "volcano-system/gpu-tessera-assignment-keys"`, `unsignedAssignments: "refuse"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("agent config lacks %s:\n%s", want, conf)
		}
	}
}

// Every switch renders on its own, and the pieces that depend on another follow it.
func TestTheSecuritySwitchesRenderAlone(t *testing.T) {
	for _, values := range []string{
		"scheduler: {enabled: false}\n",
		"devicePlugin: {enabled: false}\n",
		"metrics: {authentication: false, readerRole: false, networkPolicy: {enabled: false}}\n",
		"rbac: {create: false}\n",
		"devicePlugin:\n  config: {metricsPort: 0}\n",
		"metrics: {readerRole: false}\n",
		"scheduler:\n  signing: {enabled: false}\n",
	} {
		r, err := RenderValues(t, values)
		if err != nil {
			t.Errorf("values %q: %v", values, err)
			continue
		}
		switch values {
		case "devicePlugin:\n  config: {metricsPort: 0}\n":
			var np networkingv1.NetworkPolicy
			r.Get(t, "NetworkPolicy", "gpu-tessera-device-plugin-metrics", &np)
			if len(np.Spec.Ingress) != 0 {
				t.Errorf("no metrics port, yet the agent admits %+v", np.Spec.Ingress)
			}
			if a := args(agentPod(t, r).Containers[0]); strings.Contains(a, "metrics-auth") {
				t.Errorf("no metrics port, yet %s", a)
			}
		case "metrics: {readerRole: false}\n", "rbac: {create: false}\n":
			var p corev1.Pod
			r.Get(t, "Pod", "gpu-tessera-test", &p)
			if r.Has("ClusterRoleBinding", "gpu-tessera-test-metrics") || !strings.Contains(p.Spec.Containers[0].Args[0], "skipped") {
				t.Errorf("%q: the test pod binds a role the chart does not create", values)
			}
		case "scheduler: {enabled: false}\n":
			if r.Has("NetworkPolicy", "gpu-tessera-scheduler-metrics") || r.Has("Role", "gpu-tessera-scheduler-signing") {
				t.Errorf("scheduler objects without the scheduler: %v", r.Names())
			}
		}
	}
}
