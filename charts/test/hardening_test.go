package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// values.schema.json refuses what the templates would otherwise turn into a broken
// install, and Helm's message names the value.
func TestTheSchemaRefusesMisspelledAndOutOfRangeValues(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"devicePlugin:\n  confg: {sharesPerCard: 4}\n", "confg"},
		{"devicePlugin:\n  config: {preload: LD_PRELOAD}\n", "preload"},
		{"devicePlugin:\n  config: {sharesPerCard: 0}\n", "sharesPerCard"},
		{"devicePlugin:\n  config: {heartbeatInterval: 30}\n", "heartbeatInterval"},
		{"devicePlugin:\n  config: {otherGPUPlugins: ignore}\n", "otherGPUPlugins"},
		{"scheduler:\n  vgpu: {memoryOversubscription: 8}\n", "memoryOversubscription"},
		{"scheduler:\n  vgpu: {nodePolicy: packed}\n", "nodePolicy"},
		{"scheduler:\n  schedulePeriod: 1 second\n", "schedulePeriod"},
		{"scheduler:\n  podDisruptionBudget: {maxUnavailable: half}\n", "maxUnavailable"},
		{"sheduler:\n  enabled: false\n", "sheduler"},
		{"prometheusRule:\n  memoryCapRatio: 95\n", "memoryCapRatio"},
		{"prometheusRule:\n  hookNotLoadedFor: 15\n", "hookNotLoadedFor"},
		{"grafanaDashboard:\n  enable: true\n", "enable"},
	} {
		_, err := RenderValues(t, c.values)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %q: err = %v, want a schema error naming %s", c.values, err, c.want)
		}
	}
	for _, ok := range []string{
		"scheduler:\n  vgpu: {heartbeatTimeout: \"0\"}\n",
		"scheduler:\n  podDisruptionBudget: {minAvailable: 1}\n",
		"scheduler:\n  livenessProbe: null\n",
		"devicePlugin:\n  config: {metricsPort: 0}\n",
		"prometheusRule: {enabled: true, memoryCapRatio: 0.9}\ngrafanaDashboard: {enabled: true, namespace: monitoring}\nserviceMonitor: {enabled: true}\n",
		"devicePlugin:\n  hostPID: false\n",
	} {
		if _, err := RenderValues(t, ok); err != nil {
			t.Errorf("values %q refused: %v", ok, err)
		}
	}
}

// Every example values file the docs and tests use passes the schema.
func TestTheExampleValuesPassTheSchema(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "vgpuenable-") {
			continue // refused by the templates on purpose, after the schema
		}
		if _, err := Render(t, f, "volcano-system"); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A chart release that changes nothing in the pods must not restart them: no chart
// version in the pod templates.
func TestAChartVersionBumpLeavesThePodTemplatesAlone(t *testing.T) {
	templates := func(version string) (appsv1.Deployment, appsv1.DaemonSet) {
		ch := loadChart(t)
		ch.Metadata.Version = version
		r, err := RenderChart(t, ch, map[string]interface{}{}, "volcano-system")
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
		var ds appsv1.DaemonSet
		r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
		return d, ds
	}
	d1, ds1 := templates("0.1.0")
	d2, ds2 := templates("0.2.0")
	if !reflect.DeepEqual(d1.Spec.Template, d2.Spec.Template) {
		t.Errorf("the scheduler's pod template changes with the chart version: %v vs %v", d1.Spec.Template.Labels, d2.Spec.Template.Labels)
	}
	if !reflect.DeepEqual(ds1.Spec.Template, ds2.Spec.Template) {
		t.Errorf("the agent's pod template changes with the chart version: %v vs %v", ds1.Spec.Template.Labels, ds2.Spec.Template.Labels)
	}
	if d1.Labels["helm.sh/chart"] == d2.Labels["helm.sh/chart"] {
		t.Errorf("the Deployment's own labels should still carry the chart version")
	}
}

// The ServiceAccounts do not depend on rbac.create, and a given name reaches the pods
// and the bindings.
func TestServiceAccountsAreIndependentOfRBAC(t *testing.T) {
	r, err := RenderValues(t, "rbac: {create: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	r = r.WithoutHooks()
	if k := r.Kinds(); k["ServiceAccount"] != 3 || k["ClusterRole"] != 0 || k["ClusterRoleBinding"] != 0 || k["Role"] != 0 {
		t.Errorf("rbac.create=false renders %v, want the 3 ServiceAccounts (scheduler, agent, webhook) and no roles", k)
	}
	r, err = RenderValues(t, "scheduler:\n  serviceAccount: {create: false, name: sched-sa}\n"+
		"devicePlugin:\n  serviceAccount: {create: true, name: agent-sa, annotations: {team: gpu}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if k := r.WithoutHooks().Kinds(); k["ServiceAccount"] != 2 {
		t.Errorf("%d ServiceAccounts, want only the agent's and the webhook's", k["ServiceAccount"])
	}
	var sa corev1.ServiceAccount
	r.Get(t, "ServiceAccount", "agent-sa", &sa)
	if sa.Annotations["team"] != "gpu" {
		t.Errorf("agent ServiceAccount annotations %v", sa.Annotations)
	}
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	if d.Spec.Template.Spec.ServiceAccountName != "sched-sa" || ds.Spec.Template.Spec.ServiceAccountName != "agent-sa" {
		t.Errorf("pods use %q and %q", d.Spec.Template.Spec.ServiceAccountName, ds.Spec.Template.Spec.ServiceAccountName)
	}
	for name, sa := range map[string]string{"gpu-tessera-scheduler": "sched-sa", "gpu-tessera-vgpu-device-plugin": "agent-sa"} {
		var b rbacv1.ClusterRoleBinding
		r.Get(t, "ClusterRoleBinding", name, &b)
		if b.Subjects[0].Name != sa {
			t.Errorf("binding %s names %q, want %q", name, b.Subjects[0].Name, sa)
		}
	}
}

func TestFullnameOverrideNamesEveryObject(t *testing.T) {
	r, err := RenderValues(t, "fullnameOverride: tsr\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Objs {
		if !strings.HasPrefix(o.GetName(), "tsr") {
			t.Errorf("%s/%s does not use fullnameOverride", o.GetKind(), o.GetName())
		}
	}
}

func TestProbesAndTheSchedulersDisruptionBudget(t *testing.T) {
	r := MustRender(t, "")
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	c := d.Spec.Template.Spec.Containers[0]
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Port.StrVal != "healthz" {
		t.Errorf("scheduler probes: liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	a := ds.Spec.Template.Spec.Containers[0]
	if a.LivenessProbe == nil || a.LivenessProbe.HTTPGet.Path != "/healthz" || a.ReadinessProbe == nil || a.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		a.ReadinessProbe.HTTPGet.Port.StrVal != "metrics" {
		t.Errorf("agent probes: liveness %+v readiness %+v", a.LivenessProbe, a.ReadinessProbe)
	}
	var pdb policyv1.PodDisruptionBudget
	r.Get(t, "PodDisruptionBudget", "gpu-tessera-scheduler", &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil ||
		!subset(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("budget %+v does not select the scheduler pods with maxUnavailable 1", pdb.Spec)
	}

	r, err := RenderValues(t, "devicePlugin:\n  config: {metricsPort: 0}\nscheduler:\n  podDisruptionBudget: {minAvailable: 1}\n")
	if err != nil {
		t.Fatal(err)
	}
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	if a := ds.Spec.Template.Spec.Containers[0]; a.LivenessProbe != nil || a.ReadinessProbe != nil {
		t.Errorf("agent probes without a metrics port: %+v %+v", a.LivenessProbe, a.ReadinessProbe)
	}
	r.Get(t, "PodDisruptionBudget", "gpu-tessera-scheduler", &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("budget with minAvailable 1: %+v", pdb.Spec)
	}
}

// `helm test`: one hook pod that checks the scheduler's metrics and an agent's
// readiness through their Services; its script is valid shell.
func TestHelmTestPodChecksTheSchedulerAndAnAgent(t *testing.T) {
	r := MustRender(t, "")
	var p corev1.Pod
	r.Get(t, "Pod", "gpu-tessera-test", &p)
	if p.Annotations["helm.sh/hook"] != "test" || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("test pod annotations %v restartPolicy %q", p.Annotations, p.Spec.RestartPolicy)
	}
	c := p.Spec.Containers[0]
	if c.Image != "ghcr.io/tessera-gpu/vgpu-device-plugin:0.1.0" {
		t.Errorf("test pod image %q, want the agent's (it has busybox)", c.Image)
	}
	script := c.Args[0]
	for _, want := range []string{
		"http://gpu-tessera-scheduler-metrics.volcano-system.svc", ":8080/metrics", "'^tessera_scheduler_'",
		"http://gpu-tessera-vgpu-device-plugin-metrics.volcano-system.svc:9394", "/readyz",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("test script lacks %s:\n%s", want, script)
		}
	}
	f := filepath.Join(t.TempDir(), "smoke.sh")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
		t.Errorf("the test script is not valid shell: %v\n%s", err, out)
	}
}
