package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

func run(t *testing.T, objs []runtime.Object, command string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), testEnv(t, &out, &errOut, objs...), command, args)
	return out.String(), errOut.String(), err
}

func mustRun(t *testing.T, objs []runtime.Object, command string, args ...string) string {
	t.Helper()
	out, errOut, err := run(t, objs, command, args...)
	if err != nil {
		t.Fatalf("tessera %s %v: %v\nstderr: %s", command, args, err, errOut)
	}
	return out
}

func TestNodesTableShowsEachCardWithItsUsageAndEachUnusableNodeWithWhy(t *testing.T) {
	out := mustRun(t, cluster(t), "nodes")
	for _, want := range []string{
		"gpu-a", "NVIDIA A100-SXM4-40GB", "30000/40960", "50%", "fixed-share", "team-a/train-0",
		"40960/40960", "100%", "exclusive", "team-b/infer-0",
		"4000/15360", "Tesla T4", "serving/bert-0",
		"gpu-old", "unusable", "node agent heartbeat is 10m0s old (limit 1m30s)",
		"cpu-1", "no-inventory",
		"UNHEALTHY",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("nodes table lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 1+2+1+1+1+1 {
		t.Errorf("%d lines, want a header, one per card and one per card-less node:\n%s", lines, out)
	}
}

func TestNodesJSONCarriesTheNumbers(t *testing.T) {
	var list NodeCardsList
	if err := json.Unmarshal([]byte(mustRun(t, cluster(t), "nodes", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.APIVersion != APIVersion || list.Kind != KindNodeCardsList {
		t.Errorf("list is %s %s, want %s %s", list.APIVersion, list.Kind, APIVersion, KindNodeCardsList)
	}
	by := map[string]NodeView{}
	for _, n := range list.Items {
		if n.APIVersion != APIVersion || n.Kind != KindNodeCards {
			t.Errorf("item %s is %s %s", n.Name, n.APIVersion, n.Kind)
		}
		by[n.Name] = n.NodeView
	}
	a := by["gpu-a"]
	if a.Status != StatusReady || a.Source != SourceTessera || len(a.Cards) != 2 {
		t.Fatalf("gpu-a: %+v", a)
	}
	c0, c1 := a.Cards[0], a.Cards[1]
	if c0.UsedMemoryMiB != 30000 || c0.UsedCores != 50 || c0.Tenants != 1 || c0.QoS != "fixed-share" ||
		len(c0.Pods) != 1 || c0.Pods[0].Queue != "research" || c0.Pods[0].Pod != "train-0" {
		t.Errorf("card 0: %+v", c0)
	}
	if c1.QoS != "exclusive" || c1.UsedCores != 100 {
		t.Errorf("card 1: %+v", c1)
	}
	if b := by["gpu-b"]; b.Source != SourceHAMi || b.Cards[0].UsedMemoryMiB != 4000 || b.Cards[0].Pods[0].Container != "main" {
		t.Errorf("HAMi node: %+v", b)
	}
	if o := by["gpu-old"]; o.Status != StatusUnusable || !strings.Contains(o.Reason, "heartbeat") {
		t.Errorf("stale node: %+v", o)
	}
	if s := by["gpu-sick"]; s.Cards[0].Healthy {
		t.Errorf("sick card shown healthy")
	}
	if by["cpu-1"].Status != StatusNoInventory {
		t.Errorf("cpu node: %+v", by["cpu-1"])
	}
}

func explain(t *testing.T, objs []runtime.Object, pod string, args ...string) *ExplainView {
	t.Helper()
	var v ExplainView
	out := mustRun(t, objs, "explain", append([]string{pod, "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return &v
}

func TestExplainGivesEveryNodeTheSchedulersReason(t *testing.T) {
	v := explain(t, cluster(t), "big")
	if v.Status != ExplainNoNodeFits {
		t.Fatalf("status %s", v.Status)
	}
	want := map[string]struct {
		reason     string
		resolvable bool
	}{
		"gpu-a":    {`vgpu: container "main" needs 1 cards, 0 of 2 fit (1 insufficient cores, 1 insufficient memory)`, true},
		"gpu-b":    {`vgpu: container "main" needs 1 cards, 0 of 1 fit (1 smaller than the request)`, false},
		"gpu-old":  {"vgpu: node agent heartbeat is 10m0s old (limit 1m30s)", false},
		"cpu-1":    {"vgpu: node has no vGPU inventory", false},
		"gpu-sick": {`vgpu: container "main" needs 1 cards, 0 of 1 fit (1 unhealthy)`, false},
	}
	if len(v.Nodes) != len(want) {
		t.Fatalf("%d nodes: %+v", len(v.Nodes), v.Nodes)
	}
	for _, n := range v.Nodes {
		w := want[n.Node]
		if n.Fits || n.Reason != w.reason || n.Resolvable != w.resolvable {
			t.Errorf("%s: fits %v, resolvable %v, reason %q; want %q (resolvable %v)", n.Node, n.Fits, n.Resolvable, n.Reason, w.reason, w.resolvable)
		}
	}
	if v.Nodes[0].Node != "gpu-a" {
		t.Errorf("the node where waiting may help should come first, got %s", v.Nodes[0].Node)
	}
	var detail []string
	for _, r := range v.Nodes[0].Rejects {
		detail = append(detail, r.String())
	}
	if got := strings.Join(detail, "; "); got != "card 0 (GPU-a0): insufficient memory: 20000 MiB wanted, 10960 of 40960 MiB free; "+
		"card 1 (GPU-a1): not idle for an exclusive request: an exclusive (100% cores) request needs an idle card; 1 tenants" &&
		got != "card 0 (GPU-a0): insufficient memory: 20000 MiB wanted, 10960 of 40960 MiB free; card 1 (GPU-a1): insufficient cores: card's cores are fully taken" {
		t.Errorf("per-card detail: %s", got)
	}
	text := mustRun(t, cluster(t), "explain", "big")
	for _, s := range []string{"Pod team-a/big: no-node-fits", `container "main" asks for 1 card(s), each 20000 MiB and 30% cores`,
		"0 of 5 nodes", "~ gpu-a:", "- cpu-1: vgpu: node has no vGPU inventory", "card 0 (GPU-a0): insufficient memory"} {
		if !strings.Contains(text, s) {
			t.Errorf("explain text lacks %q:\n%s", s, text)
		}
	}
}

func TestExplainNamesTheCardsAFittingPodWouldGet(t *testing.T) {
	v := explain(t, cluster(t), "small")
	if v.Status != ExplainFits {
		t.Fatalf("status %s: %+v", v.Status, v.Nodes)
	}
	fits := map[string]NodeFit{}
	for _, n := range v.Nodes {
		if n.Fits {
			fits[n.Node] = n
		}
	}
	if len(fits) != 2 || fits["gpu-a"].Cards[0].Cards[0].UUID != "GPU-a0" || fits["gpu-b"].Cards[0].Cards[0].UUID != "GPU-b0" {
		t.Errorf("fitting nodes: %+v", fits)
	}
	if !v.Nodes[0].Fits || !v.Nodes[1].Fits || v.Nodes[0].Score < v.Nodes[1].Score {
		t.Errorf("fitting nodes are not first, best score first: %+v", v.Nodes[:2])
	}
}

func TestExplainStatesForOtherPods(t *testing.T) {
	objs := cluster(t)
	bad := vgpuPod("team-a", "gold", "research", 1, 1000, 10)
	bad.Annotations[api.AnnotationQoS] = "gold"
	objs = append(objs, bad)
	for pod, want := range map[string]string{"gold": ExplainInvalid, "train-0": ExplainPlaced, "web": ExplainNoVGPU} {
		v := explain(t, objs, pod)
		if v.Status != want {
			t.Errorf("%s: status %s, want %s", pod, v.Status, want)
		}
		if pod == "gold" && !strings.Contains(v.Reason, "annotation tessera.io/qos") {
			t.Errorf("invalid pod's reason does not name the annotation: %s", v.Reason)
		}
	}
}

func TestTheSchedulersConfChangesTheVerdict(t *testing.T) {
	conf := `actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: gang
  - name: vgpu
    arguments:
      vgpu.HeartbeatTimeout: "0"
      vgpu.MemoryOversubscription: 2.0
`
	path := filepath.Join(t.TempDir(), "volcano-scheduler.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "volcano-system", Name: "sched"},
		Data: map[string]string{"volcano-scheduler.conf": conf}}
	for _, flag := range []string{"--scheduler-conf=" + path, "--scheduler-configmap=volcano-system/sched"} {
		v := explain(t, append(cluster(t), cm), "big", flag)
		fits := map[string]bool{}
		for _, n := range v.Nodes {
			fits[n.Node] = n.Fits
		}
		// Twice the memory: gpu-a's card 0 has 81920-30000 MiB free and the T4 holds 30720 MiB;
		// no heartbeat check: gpu-old is usable. The unhealthy card stays out.
		if !fits["gpu-a"] || !fits["gpu-old"] || !fits["gpu-b"] || fits["gpu-sick"] || fits["cpu-1"] {
			t.Errorf("%s: fits %v", flag, fits)
		}
	}
	_, _, err := run(t, cluster(t), "nodes", "--scheduler-configmap=volcano-system/missing")
	if err == nil {
		t.Errorf("a missing ConfigMap is not an error")
	}
	if _, err := pluginargs.FromConf("tiers: [{plugins: [{name: gang}]}]"); err == nil {
		t.Errorf("a conf without vgpu is accepted")
	}
	a, err := pluginargs.FromConf("tiers: [{plugins: [{name: vgpu, arguments: {vgpu.Weight: -3}}]}]")
	var bad *pluginargs.InvalidError
	if !errors.As(err, &bad) || a.Weight != 5 {
		t.Errorf("a bad argument: err %v, weight %v (want the default 5, as the scheduler)", err, a.Weight)
	}
}

func TestPodShowsItsCardsAndHandoff(t *testing.T) {
	objs := cluster(t)
	for _, c := range []struct{ ns, pod, want string }{
		{"team-a", "train-0", "card 0 GPU-a0 NVIDIA A100-SXM4-40GB: 30000 MiB, 50% cores"},
		{"team-a", "train-0", "Handoff:    done"},
		{"team-b", "infer-0", "Handoff:    failed"},
		{"serving", "bert-0", "Assignment: volcano"},
		{"team-a", "big", "tessera explain big -n team-a"},
		{"team-a", "web", "requests no vGPU resources"},
	} {
		out := mustRun(t, objs, "pod", c.pod, "-n", c.ns)
		if !strings.Contains(out, c.want) {
			t.Errorf("pod %s/%s lacks %q:\n%s", c.ns, c.pod, c.want, out)
		}
	}
	var v PodView
	if err := json.Unmarshal([]byte(mustRun(t, objs, "pod", "train-0", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Node != "gpu-a" || v.Handoff != api.HandoffDone || v.Queue != "research" || v.AssignedAt != "2026-03-01T11:59:00Z" ||
		len(v.Containers) != 1 || v.Containers[0].Cards[0].Index != 0 || v.Source != "tessera" {
		t.Errorf("pod JSON: %+v", v)
	}
	if _, _, err := run(t, objs, "pod", "nope"); err == nil || !strings.Contains(err.Error(), "team-a/nope") {
		t.Errorf("missing pod: %v", err)
	}
}

func TestBadCommandLinesAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"pod"}, {"explain", "a", "b"}, {"nodes", "-o", "bogus"}, {"pod", "x", "-o", "wide"},
		{"report", "extra", "--html", "x.html"}, {"report"}, {"frobnicate"}, {"nodes", "-l", "a in (b"}, {"nodes", "--bogus"}} {
		if _, _, err := run(t, cluster(t), args[0], args[1:]...); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// explain says what in the scheduler's conf keeps the plugin from serving the pod, on
// stderr for every command and in the view.
func TestExplainNamesTheConfsHazards(t *testing.T) {
	conf := `actions: "enqueue, allocate, reclaim"
tiers:
- plugins: [{name: gang}, {name: vgpu}]
- plugins: [{name: proportion}]
`
	path := filepath.Join(t.TempDir(), "volcano-scheduler.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := run(t, cluster(t), "explain", "big", "--scheduler-conf="+path, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v ExplainView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.ConfFindings) != 2 || !strings.Contains(v.ConfFindings[0], "proportion (tier 2) offers reclaim victims") ||
		!strings.Contains(v.ConfFindings[1], "lack preempt") {
		t.Errorf("confFindings %q, want proportion's reclaim victims and the missing preempt action", v.ConfFindings)
	}
	if !strings.Contains(errOut, "warning: scheduler conf: proportion (tier 2)") {
		t.Errorf("stderr lacks the finding:\n%s", errOut)
	}
	text := mustRun(t, cluster(t), "explain", "big", "--scheduler-conf="+path)
	if !strings.Contains(text, "scheduler conf: proportion (tier 2) offers reclaim victims") {
		t.Errorf("text explain lacks the finding:\n%s", text)
	}
}

// explain reads each card's CUDA context reserve off the node as the scheduler does:
// beside the inventory, and a malformed one is no reserve, never an unusable node.
func TestExplainSeesTheContextReserve(t *testing.T) {
	node := func(name, reserve string) *corev1.Node {
		n := tesseraNode(t, name, now, card("GPU-"+name, 0, "NVIDIA H100 80GB HBM3", 81559))
		n.Annotations[api.AnnotationContextReserve] = reserve
		return n
	}
	pod := vgpuPod("team-a", "tiny", "research", 1, 256, 10)
	v := explain(t, []runtime.Object{node("gpu-r", `{"version":"v1","cards":{"GPU-gpu-r":518}}`), pod}, "tiny")
	const want = `vgpu: container "main" asks 256Mi of vGPU memory; cards on this node need at least 518Mi for a CUDA context (contextReserve)`
	if v.Status != ExplainNoNodeFits || len(v.Nodes) != 1 || v.Nodes[0].Reason != want || v.Nodes[0].Resolvable {
		t.Errorf("explain %+v\nwant the unresolvable reason %q", v, want)
	}
	v = explain(t, []runtime.Object{node("gpu-bad", `{"version":"v1","cards":{"GPU-gpu-bad":"518Mi"}}`), pod}, "tiny")
	if v.Status != ExplainFits {
		t.Errorf("explain %+v with a malformed reserve, want the pod to fit as if there were none", v)
	}
}

// explain books a placed idle-only pod as the scheduler does, from its own card policy
// annotation: a pod that would fit beside it is told the card is held.
func TestExplainSeesAnIdleOnlyHolder(t *testing.T) {
	node := tesseraNode(t, "gpu-m", now, card("GPU-m0", 0, "NVIDIA A100-SXM4-40GB", 40960))
	holder := placed(t, vgpuPod("team-a", "mutex", "research", 1, 1000, 10), "gpu-m", api.QoSFixedShare, api.HandoffDone,
		api.CardAssignment{UUID: "GPU-m0", MemoryMiB: 1000, Cores: 10})
	holder.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
	v := explain(t, []runtime.Object{node, holder, vgpuPod("team-a", "small", "research", 1, 1000, 10)}, "small")
	if v.Status != ExplainNoNodeFits || len(v.Nodes) != 1 || !strings.Contains(v.Nodes[0].Reason, "card 0 is held by an idle-only pod") ||
		!v.Nodes[0].Resolvable {
		t.Errorf("explain %+v\nwant the card held by the idle-only pod, resolvable", v)
	}
}

// A pod's own score weights are in the explanation, in the annotation's canonical form,
// and in the text beside the policies; a pod without them shows none.
func TestExplainShowsThePodsScoreWeights(t *testing.T) {
	objs := cluster(t)
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Name == "small" {
			p.Annotations[api.AnnotationScoreWeights] = "topology=1, policy=3"
		}
	}
	v := explain(t, objs, "small")
	if v.Options == nil || v.Options.ScoreWeights != "policy=3,topology=1" {
		t.Fatalf("options %+v, want the pod's weights policy=3,topology=1", v.Options)
	}
	var b strings.Builder
	if err := WriteExplain(&b, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "score weights: policy=3,topology=1 (tessera.io/score-weights;") {
		t.Errorf("the text does not show the weights:\n%s", b.String())
	}
	if w := explain(t, cluster(t), "small"); w.Options.ScoreWeights != "" {
		t.Errorf("a pod without the annotation shows weights %q", w.Options.ScoreWeights)
	}
}
