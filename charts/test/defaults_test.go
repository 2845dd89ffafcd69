package charttest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/yaml"
	"volcano.sh/volcano/pkg/scheduler"
)

// repoFile reads a file of the repository, relative to its root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ChartDir, "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadedConf is a volcano-scheduler.conf as Volcano's scheduler loads it (defaults applied),
// in JSON so that 1 and 1.0, quoted and bare strings compare as the scheduler reads them.
func loadedConf(t *testing.T, name, text string) string {
	t.Helper()
	actions, tiers, configurations, metrics, err := scheduler.UnmarshalSchedulerConf(text)
	if err != nil {
		t.Fatalf("%s: Volcano's loader rejects it: %v", name, err)
	}
	var names []string
	for _, a := range actions {
		names = append(names, a.Name())
	}
	b, err := json.MarshalIndent(map[string]interface{}{"actions": names, "tiers": tiers,
		"configurations": configurations, "metrics": metrics}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func chartConf(t *testing.T, values string) string {
	t.Helper()
	r, err := RenderValues(t, values)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", "gpu-tessera-scheduler-conf", &cm)
	return cm.Data["volcano-scheduler.conf"]
}

// One conf: the chart's defaults generate exactly config/volcano-scheduler.conf (which the
// e2e harness, the demo and the scale runs use), action by action, plugin by plugin,
// argument by argument.
func TestTheChartsDefaultConfIsConfigVolcanoSchedulerConf(t *testing.T) {
	shipped := loadedConf(t, "config/volcano-scheduler.conf", repoFile(t, "config/volcano-scheduler.conf"))
	generated := loadedConf(t, "the chart's default conf", chartConf(t, ""))
	if generated != shipped {
		t.Errorf("the chart's default conf and config/volcano-scheduler.conf differ:\nchart:\n%s\nconfig:\n%s", generated, shipped)
	}
	// The comparison sees a single argument.
	if other := loadedConf(t, "spread", chartConf(t, "scheduler:\n  vgpu: {nodePolicy: spread}\n")); other == shipped {
		t.Errorf("a conf with vgpu.NodePolicy spread compares equal to the shipped one: the comparison sees nothing")
	}
}

// kubeFloor is the minor version in Chart.yaml's kubeVersion (">=1.N.0-0").
func kubeFloor(t *testing.T, ch *chart.Chart) int {
	t.Helper()
	m := regexp.MustCompile(`^>=1\.(\d+)\.0-0$`).FindStringSubmatch(ch.Metadata.KubeVersion)
	if m == nil {
		t.Fatalf("Chart.yaml kubeVersion %q: want >=1.N.0-0 (the -0 admits providers' pre-release style versions)", ch.Metadata.KubeVersion)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The Kubernetes floor is one number: Chart.yaml's kubeVersion, which Helm checks on install
// and template. It is 1.30, where the chart's ValidatingAdmissionPolicies and the webhooks'
// matchConditions are GA; the docs quote the same.
func TestTheKubernetesFloorIsChartYamlsAndTheDocsQuoteIt(t *testing.T) {
	ch := loadChart(t)
	floor := kubeFloor(t, ch)
	if floor != 30 {
		t.Errorf("kubeVersion floor 1.%d; the chart needs 1.30 (admissionregistration.k8s.io/v1 policies, webhook matchConditions)", floor)
	}
	// What helm install and helm template check (action.Install calls this with the cluster's
	// or --kube-version's version).
	for v, ok := range map[string]bool{
		"v1.29.9": false, "v1.30.0": true, "v1.30.4-gke.1348000": true, "v1.34.2": true, "v1.26.0": false,
	} {
		if got := chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, v); got != ok {
			t.Errorf("Kubernetes %s compatible with %q: %t, want %t", v, ch.Metadata.KubeVersion, got, ok)
		}
	}
	// The same through Helm's own CLI, where the e2e harness has built it.
	helm := os.Getenv("TESSERA_HELM")
	if helm == "" {
		helm = filepath.Join(ChartDir, "..", "..", "e2e", ".cache", "bin", "helm")
	}
	if _, err := os.Stat(helm); err != nil {
		t.Logf("SKIPPED the helm CLI part: no helm binary at %s (set TESSERA_HELM, or make e2e builds one)", helm)
	} else {
		below := exec.Command(helm, "template", "t", ChartDir, "--kube-version", "1."+strconv.Itoa(floor-1)+".0")
		if out, err := below.CombinedOutput(); err == nil || !strings.Contains(string(out), "incompatible with Kubernetes") {
			t.Errorf("helm template --kube-version 1.%d.0: err %v, want the chart refused as incompatible\n%.400s", floor-1, err, out)
		}
		at := exec.Command(helm, "template", "t", ChartDir, "--kube-version", "1."+strconv.Itoa(floor)+".0")
		if out, err := at.CombinedOutput(); err != nil {
			t.Errorf("helm template --kube-version 1.%d.0: %v\n%.400s", floor, err, out)
		}
	}

	// Every floor the docs state is this one.
	stated := regexp.MustCompile(`Kubernetes[ |]*(?:≥|>=) ?1\.(\d+)|kubeVersion: ?"?>=1\.(\d+)|(?:run against|expected to work|supported)[^\n|]*?\b1\.(\d+)–1\.\d+`)
	for _, f := range []string{"docs/install.md", "docs/compatibility.md", "charts/tessera/README.md", "README.md",
		"docs/reference.md", "docs/troubleshooting.md", "docs/migration.md", "docs/first-job.md"} {
		text := repoFile(t, f)
		n := 0
		for _, m := range stated.FindAllStringSubmatch(text, -1) {
			minor := m[1] + m[2] + m[3]
			n++
			if minor != strconv.Itoa(floor) {
				t.Errorf("%s states a Kubernetes floor of 1.%s (%q); Chart.yaml's is 1.%d", f, minor, m[0], floor)
			}
		}
		if n == 0 && (f == "docs/install.md" || f == "docs/compatibility.md") {
			t.Errorf("%s does not state the Kubernetes floor (want e.g. \"Kubernetes | ≥ 1.%d\")", f, floor)
		}
	}
}

// As a dependency of another chart, Helm hands the chart the parent's "global" values: the
// schema must accept them.
func TestTheChartWorksAsASubchart(t *testing.T) {
	tessera := loadChart(t)
	parent := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "platform", Version: "1.0.0",
		Dependencies: []*chart.Dependency{{Name: "tessera", Version: tessera.Metadata.Version}}}}
	parent.AddDependency(tessera)
	user := map[string]interface{}{
		"global":  map[string]interface{}{"imageRegistry": "registry.example.com", "storageClass": "fast"},
		"tessera": map[string]interface{}{"scheduler": map[string]interface{}{"logLevel": 3}},
	}
	r, err := RenderChart(t, parent, user, "volcano-system")
	if err != nil {
		t.Fatalf("the chart as a subchart with global values: %v", err)
	}
	if !r.Has("Deployment", "gpu-tessera-scheduler") || !r.Has("DaemonSet", "gpu-tessera-vgpu-device-plugin") {
		t.Errorf("the subchart rendered %v", r.Names())
	}
	// And standalone with a global section, as umbrella tooling often passes one.
	if _, err := RenderValues(t, "global: {imageRegistry: registry.example.com}\n"); err != nil {
		t.Errorf("global values refused: %v", err)
	}
}

// nodeLabelsMatch evaluates a pod's nodeSelector and required node affinity against a node's
// labels, as the kube-scheduler's node-affinity filter does (terms ORed, expressions ANDed).
func nodeLabelsMatch(t *testing.T, spec corev1.PodSpec, node map[string]string) bool {
	t.Helper()
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node)) {
		return false
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	ops := map[corev1.NodeSelectorOperator]selection.Operator{corev1.NodeSelectorOpIn: selection.In,
		corev1.NodeSelectorOpNotIn: selection.NotIn, corev1.NodeSelectorOpExists: selection.Exists,
		corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		sel := labels.NewSelector()
		for _, e := range term.MatchExpressions {
			op, ok := ops[e.Operator]
			if !ok {
				t.Fatalf("node affinity operator %s: not evaluated by this test", e.Operator)
			}
			req, err := labels.NewRequirement(e.Key, op, e.Values)
			if err != nil {
				t.Fatal(err)
			}
			sel = sel.Add(*req)
		}
		if len(term.MatchFields) == 0 && sel.Matches(labels.Set(node)) {
			return true
		}
	}
	return false
}

func agentPodSpec(t *testing.T, values string) corev1.PodSpec {
	t.Helper()
	r, err := RenderValues(t, values)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	return ds.Spec.Template.Spec
}

// NFD's PCI vendor label for NVIDIA and GFD's gpu.present label (and the GPU Operator's labels).
var (
	nfdGPU      = map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}
	gfdGPU      = map[string]string{"nvidia.com/gpu.present": "true"}
	cpuNode     = map[string]string{"kubernetes.io/os": "linux"}
	operatorGPU = map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true",
		"nvidia.com/gpu.deploy.device-plugin": "false", "tessera.io/vgpu": "true"}
)

// The agent goes where NVIDIA's device-plugin chart goes: a node with either NFD's NVIDIA PCI
// label or GFD's gpu.present, and nowhere else.
func TestTheAgentRunsOnGPUNodesByEitherLabel(t *testing.T) {
	spec := agentPodSpec(t, "")
	for _, c := range []struct {
		name string
		node map[string]string
		want bool
	}{
		{"a node with node feature discovery's label only", nfdGPU, true},
		{"a node with GPU feature discovery's label only", gfdGPU, true},
		{"a CPU node", cpuNode, false},
		{"a node whose NVIDIA PCI label is false", map[string]string{"feature.node.kubernetes.io/pci-10de.present": "false"}, false},
	} {
		if got := nodeLabelsMatch(t, spec, c.node); got != c.want {
			t.Errorf("%s: agent scheduled %t, want %t", c.name, got, c.want)
		}
	}

	// A label of one's own narrows it to the GPU nodes that carry it.
	spec = agentPodSpec(t, "devicePlugin:\n  nodeSelector: {tessera.io/vgpu: \"true\"}\n")
	if !nodeLabelsMatch(t, spec, operatorGPU) || nodeLabelsMatch(t, spec, gfdGPU) {
		t.Errorf("with nodeSelector tessera.io/vgpu: the agent should run on labelled GPU nodes only")
	}
	// Dropping the default affinity leaves the selector alone (GPU nodes with no NFD or GFD label).
	spec = agentPodSpec(t, "devicePlugin:\n  nodeSelector: {tessera.io/vgpu: \"true\"}\n  affinity: {nodeAffinity: null}\n")
	if spec.Affinity != nil && spec.Affinity.NodeAffinity != nil {
		t.Errorf("affinity.nodeAffinity: null kept %+v", spec.Affinity.NodeAffinity)
	}
	if !nodeLabelsMatch(t, spec, map[string]string{"tessera.io/vgpu": "true"}) {
		t.Errorf("with the default affinity dropped, a node labelled tessera.io/vgpu only does not take the agent")
	}
	// Another affinity of one's own adds to the default node affinity (Helm merges maps).
	spec = agentPodSpec(t, "devicePlugin:\n  affinity:\n    podAntiAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n"+
		"        - weight: 1\n          podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: x}}}\n")
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.PodAntiAffinity == nil {
		t.Errorf("a podAntiAffinity of one's own dropped the default node affinity: %+v", spec.Affinity)
	}
}

// gpuOperatorValues is the values file install.md gives for a cluster with the GPU Operator:
// the test renders exactly what the page says.
func gpuOperatorValues(t *testing.T) string {
	t.Helper()
	doc := repoFile(t, "docs/install.md")
	const marker = "```yaml\n# tessera-gpu-operator.yaml\n"
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("docs/install.md has no block starting %q", marker)
	}
	rest := doc[i+len("```yaml\n"):]
	return rest[:strings.Index(rest, "```")]
}

// The GPU Operator recipe (install.md): the agent runs with the Operator's RuntimeClass on the
// nodes labelled for Tessera (which also carry the Operator's labels), and not on the GPU nodes
// left to NVIDIA's device plugin.
func TestTheGPUOperatorRecipeRendersAsInstallMdSays(t *testing.T) {
	values := gpuOperatorValues(t)
	spec := agentPodSpec(t, values)
	if spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v, want the Operator's nvidia", spec.RuntimeClassName)
	}
	if !nodeLabelsMatch(t, spec, operatorGPU) {
		t.Errorf("the agent does not go to a node labelled for Tessera by the recipe: %+v %+v", spec.NodeSelector, spec.Affinity)
	}
	left := map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.present": "true"}
	if nodeLabelsMatch(t, spec, left) {
		t.Errorf("the agent goes to a GPU node the recipe leaves to NVIDIA's device plugin")
	}
	var cfg struct {
		OtherGPUPlugins string `json:"otherGPUPlugins"`
	}
	r, err := RenderValues(t, values)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	r.Get(t, "ConfigMap", "gpu-tessera-vgpu-device-plugin-config", &cm)
	if err := yaml.Unmarshal([]byte(cm.Data["device-plugin.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OtherGPUPlugins != "refuse" {
		t.Errorf("otherGPUPlugins %q: the recipe keeps the agent off a node while NVIDIA's plugin still advertises cards", cfg.OtherGPUPlugins)
	}
}

// podAnnotations reach each component's pods; the chart's checksums win a clash.
func TestPodAnnotationsReachEveryComponent(t *testing.T) {
	r, err := RenderValues(t, "scheduler:\n  podAnnotations: {example.com/team: sched, checksum/conf: mine}\n"+
		"devicePlugin:\n  podAnnotations: {example.com/team: agent}\nadmission:\n  podAnnotations: {example.com/team: hook}\n")
	if err != nil {
		t.Fatal(err)
	}
	var sched, hook appsv1.Deployment
	var agent appsv1.DaemonSet
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &sched)
	r.Get(t, "Deployment", "gpu-tessera-admission", &hook)
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &agent)
	for who, c := range map[string]struct {
		ann      map[string]string
		want     string
		checksum string
	}{
		"scheduler": {sched.Spec.Template.Annotations, "sched", "checksum/conf"},
		"agent":     {agent.Spec.Template.Annotations, "agent", "checksum/config"},
		"webhook":   {hook.Spec.Template.Annotations, "hook", "checksum/config"},
	} {
		if c.ann["example.com/team"] != c.want {
			t.Errorf("%s pod annotations %v, want example.com/team=%s", who, c.ann, c.want)
		}
		if len(c.ann[c.checksum]) != 64 {
			t.Errorf("%s pod annotation %s = %q: the chart's checksum lost to a user annotation", who, c.checksum, c.ann[c.checksum])
		}
	}
	if _, err := RenderValues(t, "devicePlugin:\n  podAnnotations: {example.com/n: 1}\n"); err == nil ||
		!strings.Contains(err.Error(), "podAnnotations") {
		t.Errorf("a non-string annotation value: err %v, want the schema to refuse it", err)
	}
	// helm upgrade --reuse-values renders with the older chart's values, which have no
	// podAnnotations: the templates must not need them.
	ch := loadChart(t)
	for _, c := range []string{"scheduler", "devicePlugin", "admission"} {
		delete(ch.Values[c].(map[string]interface{}), "podAnnotations")
	}
	if _, err := RenderChart(t, ch, map[string]interface{}{}, "volcano-system"); err != nil {
		t.Errorf("values without podAnnotations (an upgrade with --reuse-values): %v", err)
	}
}

// schedulerPeakAt1000Nodes is the scheduler's largest measured RSS at 1,000 GPU nodes
// (docs/benchmarks.md, "Scheduler memory and CPU by cluster size": make scale, 9,238 pods).
var schedulerPeakAt1000Nodes = resource.MustParse("1475Mi")

// The scheduler's default memory holds at 1,000 nodes: the request covers the measured
// peak, and the limit leaves room for a restart's reload and the garbage collector above it.
func TestSchedulerMemoryDefaultsHoldAt1000Nodes(t *testing.T) {
	r := MustRender(t, "")
	var d appsv1.Deployment
	r.Get(t, "Deployment", "gpu-tessera-scheduler", &d)
	res := d.Spec.Template.Spec.Containers[0].Resources
	req, lim := res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory]
	if req.Cmp(schedulerPeakAt1000Nodes) < 0 {
		t.Errorf("memory request %s is below the measured peak at 1,000 nodes (%s)", req.String(), schedulerPeakAt1000Nodes.String())
	}
	if lim.Value() < 2*schedulerPeakAt1000Nodes.Value() {
		t.Errorf("memory limit %s is under twice the measured peak at 1,000 nodes (%s)", lim.String(), schedulerPeakAt1000Nodes.String())
	}
	if _, ok := res.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("a CPU limit throttles sessions that need a core for seconds: %v", res.Limits)
	}
	// The chart README's sizing table names the defaults.
	readme := repoFile(t, "charts/tessera/README.md")
	for _, q := range []resource.Quantity{req, lim, res.Requests[corev1.ResourceCPU]} {
		if !strings.Contains(readme, "`"+q.String()+"`") {
			t.Errorf("charts/tessera/README.md does not quote the default %s", q.String())
		}
	}
}

// The names the docs tell users to type are the names the chart creates, for the release
// "tessera" the docs install: ClusterRoles in `--clusterrole=`, workloads in `deploy/`,
// `ds/`, and the scheduler's ConfigMap in `volcano-system/...`.
func TestTheDocsNameObjectsTheChartCreates(t *testing.T) {
	r, err := RenderRelease(t, loadChart(t), map[string]interface{}{}, "tessera", "volcano-system")
	if err != nil {
		t.Fatal(err)
	}
	refs := []struct {
		re   *regexp.Regexp
		kind string
	}{
		{regexp.MustCompile(`--clusterrole[= ]([a-z0-9-]+)`), "ClusterRole"},
		{regexp.MustCompile(`\b(?:deploy|deployment)/(tessera[a-z0-9-]*)`), "Deployment"},
		{regexp.MustCompile(`\b(?:ds|daemonset)/(tessera[a-z0-9-]*)`), "DaemonSet"},
		{regexp.MustCompile(`volcano-system/(tessera-[a-z0-9-]+-conf)\b`), "ConfigMap"},
	}
	for _, f := range ownDocs {
		text := repoFile(t, f)
		for _, ref := range refs {
			for _, m := range ref.re.FindAllStringSubmatch(text, -1) {
				if !r.Has(ref.kind, m[1]) {
					t.Errorf("%s names %s %q, which the chart does not create for release tessera", f, ref.kind, m[1])
				}
			}
		}
	}
}

// ownDocs are the user pages that quote chart values and object names.
var ownDocs = []string{"README.md", "docs/install.md", "docs/reference.md", "docs/troubleshooting.md",
	"docs/compatibility.md", "docs/migration.md", "docs/first-job.md", "docs/benchmarks.md", "charts/tessera/README.md"}

// Every chart value the docs name exists (a value the schema refuses is one a user cannot set).
func TestTheDocsNameOnlyValuesThatExist(t *testing.T) {
	var vals map[string]interface{}
	b, err := os.ReadFile(filepath.Join(ChartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	exists := func(path string) bool {
		var v interface{} = vals
		for _, seg := range strings.Split(path, ".") {
			m, ok := v.(map[string]interface{})
			if !ok {
				return false // a scalar or list with more path after it
			}
			if len(m) == 0 {
				return true // a map the user fills
			}
			if v, ok = m[seg]; !ok {
				return false
			}
		}
		return true
	}
	// A value path in backquotes (docs) or after a space or parenthesis (values.yaml's comments);
	// file names such as admission.yaml are not values.
	ref := regexp.MustCompile("(?:^|[\\s(`])((?:scheduler|devicePlugin|admission|admissionPolicy|metrics|rbac|serviceMonitor|prometheusRule|grafanaDashboard|tests)\\.[A-Za-z0-9_.]*[A-Za-z0-9_])")
	file := regexp.MustCompile(`\.(yaml|md|conf|json|go)$`)
	for _, f := range append([]string{"charts/tessera/values.yaml"}, ownDocs...) {
		for _, m := range ref.FindAllStringSubmatch(repoFile(t, f), -1) {
			if !file.MatchString(m[1]) && !exists(m[1]) {
				t.Errorf("%s names the chart value %s, which does not exist", f, m[1])
			}
		}
	}
}

// NOTES.txt tells the installer where the agent goes and who routes pods made outside
// VolcanoJobs (with the webhook off: that they must name Volcano's scheduler themselves).
func TestNotesSayWhereTheAgentGoesAndWhoRoutesPods(t *testing.T) {
	for _, c := range []struct {
		values string
		want   []string
	}{
		{"", []string{"nvidia.com/gpu.present=true", "Admission webhook: vGPU pods outside VolcanoJobs are routed to volcano"}},
		{"admission: {enabled: false}\n", []string{"must set schedulerName: volcano themselves", "UnexpectedAdmissionError"}},
		{"devicePlugin: {nodeSelector: {tessera.io/vgpu: \"true\"}}\n", []string{`that match {"tessera.io/vgpu":"true"}`}},
	} {
		ch := loadChart(t)
		user, err := chartutil.ReadValues([]byte(c.values))
		if err != nil {
			t.Fatal(err)
		}
		vals, err := chartutil.ToRenderValues(ch, user, chartutil.ReleaseOptions{Name: "tessera", Namespace: "volcano-system",
			IsInstall: true}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(ch, vals)
		if err != nil {
			t.Fatal(err)
		}
		notes := files["tessera/templates/NOTES.txt"]
		for _, w := range c.want {
			if !strings.Contains(notes, w) {
				t.Errorf("values %q: NOTES.txt lacks %q:\n%s", c.values, w, notes)
			}
		}
	}
}
