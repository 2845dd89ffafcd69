package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// The chart's previous version, as a user upgrading has it installed: the chart at commit
// 8f81ed8 (Volcano v1.14.1, Kubernetes 1.34, the vgpu plugin in the conf's last tier),
// packaged at version and appVersion 0.1.0 (testdata/README.md says how).
const (
	previousChart   = "testdata/tessera-0.1.0.tgz"
	previousVersion = "0.1.0"
	// currentVersion is what the chart in this tree is packaged at for the upgrade, as
	// make release packages it at VERSION.
	currentVersion = "0.2.0-e2e"
	release        = "tessera"
	releaseNS      = "tessera-system"
)

// harnessUsers lets the harness's scheduler and agents, which run under the harness
// release's service accounts rather than the installed release's, write what the
// installed chart's admission policies keep for its own accounts. The release's admission
// webhook is left out: the harness runs none of the chart's pods, so nothing would answer
// it (the harness runs its own, TestAdmissionWebhookRoutesADeploymentOntoCards).
func harnessUsers() []string {
	return []string{"--set=admissionPolicy.extraSchedulerUsers={" + strings.Join(cl.SchedulerUsers(), ",") + "}",
		"--set=admission.enabled=false"}
}

// helmCLI runs Helm's own CLI (built from e2e/tools/helm) against the e2e API server,
// with its cache, config and data in dir.
type helmCLI struct {
	bin, kubeconfig, dir string
}

func (h helmCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+h.kubeconfig, "HELM_CACHE_HOME="+filepath.Join(h.dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.dir, "config"), "HELM_DATA_HOME="+filepath.Join(h.dir, "data"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// packageCurrent packages the chart in this tree at currentVersion, as make release does
// at VERSION, and returns the archive.
func (h helmCLI) packageCurrent(t *testing.T) string {
	t.Helper()
	out := filepath.Join(h.dir, "chart")
	h.run(t, "package", filepath.Join("..", "..", "charts", "tessera"), "--version", currentVersion,
		"--app-version", currentVersion, "--destination", out)
	return filepath.Join(out, "tessera-"+currentVersion+".tgz")
}

// rollout does to the running programs what the chart's Deployment and DaemonSet do after
// an install or upgrade (cluster/rollout.go): the scheduler restarted with the release's
// volcano-scheduler.conf, the agents one node at a time with its device-plugin.yaml (under
// the harness's paths and the suite's timings). It returns the two files' contents.
func rollout(t *testing.T, dir, version string) (schedConf, agentConf string) {
	t.Helper()
	ctx := context.Background()
	read := func(component, key string) string {
		cms, err := cl.Client.CoreV1().ConfigMaps(releaseNS).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=" + component})
		if err != nil || len(cms.Items) != 1 {
			t.Fatalf("the %s ConfigMap of release %s: %v (%d found)", component, release, err, len(cms.Items))
		}
		cm := cms.Items[0]
		if v := cm.Labels["app.kubernetes.io/version"]; v != version {
			t.Fatalf("ConfigMap %s is from version %q, want %s", cm.Name, v, version)
		}
		data, ok := cm.Data[key]
		if !ok {
			t.Fatalf("ConfigMap %s has no %s", cm.Name, key)
		}
		return data
	}
	schedConf, agentConf = read("scheduler", "volcano-scheduler.conf"), read("device-plugin", "device-plugin.yaml")
	// The suite's heartbeat timeout, as TestMain sets it, so the stale-agent timing holds.
	conf := strings.Replace(schedConf, "vgpu.HeartbeatTimeout: 90s", "vgpu.HeartbeatTimeout: "+heartbeatTimeout, 1)
	schedPath, agentPath := filepath.Join(dir, "scheduler-"+version+".conf"), filepath.Join(dir, "agent-"+version+".yaml")
	if err := os.WriteFile(schedPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentPath, []byte(agentConf), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cl.RestartScheduler(ctx, schedPath); err != nil {
		t.Fatal(err)
	}
	if err := cl.RollAgents(ctx, agentPath, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("rolled out %s: scheduler and %d agents replaced in %s", version, len(nodes), time.Since(start).Round(100*time.Millisecond))
	return schedConf, agentConf
}

// deleteReleaseNamespace deletes the release's namespace and waits until it is gone, so
// that the next scenario can install into it again.
func deleteReleaseNamespace(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	_ = cl.Client.CoreV1().Namespaces().Delete(ctx, releaseNS, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cl.Client.CoreV1().Namespaces().Get(ctx, releaseNS, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s not deleted: %v", releaseNS, err)
	}
}

// restoreHarness puts back the suite's own scheduler conf and agent flags.
func restoreHarness(t *testing.T) {
	ctx := context.Background()
	if err := cl.RestartScheduler(ctx, ""); err != nil {
		t.Errorf("scheduler back to the suite's conf: %v", err)
	}
	if err := cl.RollAgents(ctx, "", 90*time.Second); err != nil {
		t.Errorf("agents back to the suite's flags: %v", err)
	}
}

// podState is what an upgrade must leave alone on a running pod.
type podState struct {
	UID, Node   string
	Annotations map[string]string
	Restarts    int32
	Records     map[string]string // CRI record file name -> contents
	Slots       map[string][]string
}

func snapshot(t *testing.T, pods []corev1.Pod) map[string]podState {
	t.Helper()
	h := handed(t)
	out := map[string]podState{}
	for _, p := range pods {
		s := podState{UID: string(p.UID), Node: p.Spec.NodeName, Annotations: p.Annotations, Records: map[string]string{},
			Slots: map[string][]string{}}
		for _, cs := range p.Status.ContainerStatuses {
			s.Restarts += cs.RestartCount
		}
		files, _ := filepath.Glob(filepath.Join(cl.RecordDir(p.Spec.NodeName), "*_"+string(p.UID)+"_*.json"))
		if len(files) == 0 {
			t.Fatalf("pod %s on %s has no CRI record", p.Name, p.Spec.NodeName)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s.Records[filepath.Base(f)] = string(b)
		}
		for _, c := range p.Spec.Containers {
			s.Slots[c.Name] = h.Slots[string(p.UID)+"/"+c.Name]
		}
		out[p.Name] = s
	}
	return out
}

func diffStates(before, after map[string]podState) []string {
	var bad []string
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			bad = append(bad, name+": no longer running")
		case a.UID != b.UID:
			bad = append(bad, fmt.Sprintf("%s: UID %s, was %s (recreated)", name, a.UID, b.UID))
		case a.Node != b.Node:
			bad = append(bad, fmt.Sprintf("%s: on %s, was on %s", name, a.Node, b.Node))
		case a.Restarts != b.Restarts:
			bad = append(bad, fmt.Sprintf("%s: %d container restarts, was %d", name, a.Restarts, b.Restarts))
		}
		for k, v := range b.Annotations {
			if a.Annotations[k] != v {
				bad = append(bad, fmt.Sprintf("%s: annotation %s = %q, was %q", name, k, a.Annotations[k], v))
			}
		}
		for k := range a.Annotations {
			if _, ok := b.Annotations[k]; !ok {
				bad = append(bad, fmt.Sprintf("%s: new annotation %s = %q", name, k, a.Annotations[k]))
			}
		}
		if fmt.Sprint(a.Records) != fmt.Sprint(b.Records) {
			bad = append(bad, fmt.Sprintf("%s: CRI records changed (%d files, were %d)", name, len(a.Records), len(b.Records)))
		}
		if fmt.Sprint(a.Slots) != fmt.Sprint(b.Slots) {
			bad = append(bad, fmt.Sprintf("%s: kubelet slots %v, were %v", name, a.Slots, b.Slots))
		}
	}
	sort.Strings(bad)
	return bad
}

// runningPods lists the namespace's Running pods.
func runningPods(t *testing.T, n string) []corev1.Pod {
	t.Helper()
	pods, err := cl.Client.CoreV1().Pods(n).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitAllCardsFree waits until every card of every node that takes shares (not in MIG
// mode) is healthy and holds nothing, so the scenario can fill the cluster exactly; it
// returns the number of those cards.
func waitAllCardsFree(t *testing.T) int {
	t.Helper()
	var cards int
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		l, _, err := workload.Ledger(ctx, cl.Client)
		if err != nil {
			return false, nil
		}
		cards, last = 0, ""
		for k, u := range l {
			if u.Card.MIG {
				continue // gpu-e's cards in MIG mode take whole instances, never shares
			}
			cards++
			if !u.Card.Healthy || len(u.Holders) > 0 {
				last = fmt.Sprintf("%s: healthy %t, %d holders", k, u.Card.Healthy, len(u.Holders))
				return false, nil
			}
		}
		return cards > 0, nil
	})
	if err != nil {
		t.Fatalf("cards not all free and healthy: %s", last)
	}
	return cards
}

// helm upgrade from the previous chart version while vGPU pods run. The chart's first
// version is installed and rolled out; a gang takes 60% of the cores of every card; the
// chart is upgraded (its scheduler conf and agent config change, so the Deployment and the
// DaemonSet roll) and the scheduler and every agent are replaced as the rollout does. Then
// every running pod has its UID, node, annotations, CRI records and kubelet slots
// unchanged; a second gang, 40% of every card, fits only on the capacity the first left (the
// ledger rebuilt from the API server): all of it runs and no card is over-committed; one
// more pod finds no card and stays pending.
func TestUpgradeFromThePreviousChartKeepsRunningPodsCards(t *testing.T) {
	n := ns(t, "upgrade")
	defer cleanup(t, n)
	ctx := context.Background()
	dir := t.TempDir()
	helm := helmCLI{bin: cl.Opts.Bin.Helm, kubeconfig: cl.Kubeconfig, dir: dir}
	cards := waitAllCardsFree(t)

	helm.run(t, "install", release, previousChart, "--namespace", releaseNS, "--create-namespace")
	defer func() {
		helm.run(t, "uninstall", release, "--namespace", releaseNS, "--wait")
		deleteReleaseNamespace(t)
		restoreHarness(t)
	}()
	oldSched, oldAgent := rollout(t, dir, previousVersion)

	first := workload.Job(n, "before", "default", int32(cards), workload.Task{Name: "t", Replicas: int32(cards),
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 50, Cores: 60}}})
	submit(t, first)
	pods, err := workload.WaitPods(ctx, cl.Client, n, first.Name, 3*time.Minute, workload.AllPhase(cards, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkHandoff(t, pods)
	before := snapshot(t, pods)
	deployBefore, dsBefore := templateChecksums(t)

	helm.run(t, append([]string{"upgrade", release, helm.packageCurrent(t), "--namespace", releaseNS}, harnessUsers()...)...)
	checkHistory(t, helm)
	deployAfter, dsAfter := templateChecksums(t)
	if deployAfter == deployBefore || dsAfter == dsBefore {
		t.Errorf("the upgrade left a pod template unchanged (scheduler %s -> %s, agent %s -> %s): nothing would roll",
			deployBefore, deployAfter, dsBefore, dsAfter)
	}
	newSched, newAgent := rollout(t, dir, currentVersion)
	if newSched == oldSched || newAgent == oldAgent {
		t.Errorf("the upgrade kept the scheduler conf (%t) or the agent config (%t): it tests nothing new", newSched == oldSched, newAgent == oldAgent)
	}

	still := runningPods(t, n)
	for _, b := range diffStates(before, snapshot(t, still)) {
		t.Error(b)
	}
	noOvercommit(t)

	second := workload.Job(n, "after", "default", int32(cards), workload.Task{Name: "t", Replicas: int32(cards),
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 40, Cores: 40}}})
	submit(t, second)
	after, err := workload.WaitPods(ctx, cl.Client, n, second.Name, 3*time.Minute, workload.AllPhase(cards, corev1.PodRunning))
	if err != nil {
		t.Fatal(err)
	}
	checkHandoff(t, after)
	l := noOvercommit(t)
	for k, u := range l {
		if u.Card.MIG {
			continue // gpu-e's cards in MIG mode and their instances took none of the gangs
		}
		if u.Cores != 100 {
			t.Errorf("%s: %d%% of its cores assigned, want 100 (60 before the upgrade + 40 after): %v", k, u.Cores, u.Holders)
		}
	}
	extra := workload.Job(n, "extra", "default", 1, workload.Task{Name: "t", Replicas: 1,
		Containers: []workload.Container{{Name: "main", Cards: 1, MemPct: 5, Cores: 10}}})
	submit(t, extra)
	// The upgraded scheduler keeps it out of the queue, and says why on its PodGroup.
	if reason, err := podGroupVGPUReason(n, extra.Name, 30*time.Second); err != nil {
		t.Errorf("one more job on a cluster whose cores are all taken: its PodGroup never says why it waits: %v", err)
	} else {
		t.Logf("one more job on a full cluster: %s", reason)
	}
	if pods, _ := workload.Pods(ctx, cl.Client, n, extra.Name); len(pods) > 1 || len(pods) == 1 && pods[0].Spec.NodeName != "" {
		t.Errorf("one more job on a cluster whose cores are all taken: %s, want no pod bound", workload.Summary(pods))
	}
	for _, b := range diffStates(before, snapshot(t, runningPods(t, n))) {
		t.Error(b)
	}
}

// templateChecksums are the chart's roll triggers on the scheduler's and the agent's pod
// templates.
func templateChecksums(t *testing.T) (scheduler, agent string) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	ds, err := cl.Client.AppsV1().Deployments(releaseNS).List(ctx, sel)
	if err != nil || len(ds.Items) != 1 {
		t.Fatalf("the release's Deployment: %v", err)
	}
	dss, err := cl.Client.AppsV1().DaemonSets(releaseNS).List(ctx, sel)
	if err != nil || len(dss.Items) != 1 {
		t.Fatalf("the release's DaemonSet: %v", err)
	}
	return ds.Items[0].Spec.Template.Annotations["checksum/conf"], dss.Items[0].Spec.Template.Annotations["checksum/config"]
}

// checkHistory: Helm recorded the upgrade from the previous chart to this one.
func checkHistory(t *testing.T, helm helmCLI) {
	t.Helper()
	var hist []struct {
		Revision   int    `json:"revision"`
		Status     string `json:"status"`
		Chart      string `json:"chart"`
		AppVersion string `json:"app_version"`
	}
	out := helm.run(t, "history", release, "--namespace", releaseNS, "--output", "json")
	if err := json.Unmarshal([]byte(out), &hist); err != nil {
		t.Fatalf("helm history: %v\n%s", err, out)
	}
	want := fmt.Sprintf("[{1 superseded tessera-%s %s} {2 deployed tessera-%s %s}]", previousVersion, previousVersion, currentVersion, currentVersion)
	if got := fmt.Sprint(hist); got != want {
		t.Errorf("helm history: %s, want %s", got, want)
	}
}
