package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"
	volcanofake "volcano.sh/apis/pkg/client/clientset/versioned/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/internal/sim"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// liveCluster is one node, gpu-a, with two A100 40 GB cards (4 shares each):
//
//	card 0  held whole by team-a/train-0 (queue research)
//	card 1  10000 MiB / 20% held by team-b/capped-run-0 (queue capped, whose
//	        capability is 10000 MiB of card memory: it is at its capability)
//
// and two pending vGPU pods: team-a/small (35000 MiB: no free card holds it) and
// team-b/capped-run-1 (4000 MiB, which card 1 could hold, but its queue may not take).
// capped-run is one gang (minMember 1) split across a running and a pending pod.
func liveCluster(t *testing.T, extra ...runtime.Object) (kubernetes.Interface, volcano.Interface) {
	t.Helper()
	inv, err := api.EncodeInventory(&api.NodeInventory{Version: api.InventoryVersion, Cards: []api.Card{
		{UUID: "GPU-a0", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMA: 0, Shares: 4, Healthy: true},
		{UUID: "GPU-a1", Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMA: 0, Shares: 4, Healthy: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-a", Annotations: map[string]string{
		api.AnnotationInventory: inv, api.AnnotationHeartbeat: now.Add(-10 * time.Second).Format(time.RFC3339)}}}
	kube := kubefake.NewSimpleClientset(append(extra, node,
		running(t, vgpuPod("team-a", "train-0", "train", 1, 40960, 100), "gpu-a", api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 40960, Cores: 100}),
		vgpuPod("team-a", "small", "small", 1, 35000, 20),
		running(t, vgpuPod("team-b", "capped-run-0", "capped-run", 1, 10000, 20), "gpu-a", api.CardAssignment{UUID: "GPU-a1", MemoryMiB: 10000, Cores: 20}),
		vgpuPod("team-b", "capped-run-1", "capped-run", 1, 10000, 20),
		// Not a vGPU pod: left alone.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}, Status: corev1.PodStatus{Phase: corev1.PodPending}})...,
	)
	vc := volcanofake.NewSimpleClientset(
		queue("default", nil), queue("research", nil),
		queue("capped", corev1.ResourceList{api.ResourceMemory: resource.MustParse("10000")}),
		podGroup("team-a", "train", "research", 1), podGroup("team-a", "small", "research", 1),
		podGroup("team-b", "capped-run", "capped", 1),
	)
	return kube, vc
}

// vgpuPod is a pending pod of PodGroup group asking for cards × mib × cores.
func vgpuPod(ns, name, group string, cards, mib, cores int64) *corev1.Pod {
	lim := corev1.ResourceList{
		api.ResourceNumber: *resource.NewQuantity(cards, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(mib, resource.DecimalSI),
		api.ResourceCores:  *resource.NewQuantity(cores, resource.DecimalSI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			schedulingv1.KubeGroupNameAnnotationKey: group}},
		Spec: corev1.PodSpec{SchedulerName: "volcano", Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Limits: lim, Requests: lim}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// running binds p to node on the cards, with the assignment the plugin writes.
func running(t *testing.T, p *corev1.Pod, node string, cards ...api.CardAssignment) *corev1.Pod {
	t.Helper()
	s, err := api.EncodeAssignment(&api.PodAssignment{Version: api.AssignmentVersion, Node: node, QoS: api.QoSFixedShare,
		Containers: []api.ContainerAssignment{{Name: "main", Cards: cards}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[api.AnnotationAssignment] = s
	p.Spec.NodeName, p.Status.Phase = node, corev1.PodRunning
	return p
}

func queue(name string, capability corev1.ResourceList) *schedulingv1.Queue {
	return &schedulingv1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedulingv1.QueueSpec{Weight: 1, Capability: capability}, Status: schedulingv1.QueueStatus{State: schedulingv1.QueueStateOpen}}
}

func podGroup(ns, name, q string, min int32) *schedulingv1.PodGroup {
	return &schedulingv1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1.PodGroupSpec{MinMember: min, Queue: q}}
}

func testEnv(kube kubernetes.Interface, vc volcano.Interface, out, errOut *bytes.Buffer) env {
	return env{stdout: out, stderr: errOut, now: func() time.Time { return now },
		clients: func(*cli.ClusterFlags) (kubernetes.Interface, volcano.Interface, error) { return kube, vc, nil }}
}

func planOf(t *testing.T, args ...string) (*sim.Plan, string) {
	t.Helper()
	return planOfCluster(t, nil, args...)
}

func planOfCluster(t *testing.T, extra []runtime.Object, args ...string) (*sim.Plan, string) {
	t.Helper()
	kube, vc := liveCluster(t, extra...)
	var out, errOut bytes.Buffer
	if err := simulateMain(context.Background(), testEnv(kube, vc, &out, &errOut), append(args, "-o", "json")); err != nil {
		t.Fatalf("simulate %v: %v\nstderr: %s", args, err, errOut.String())
	}
	var p sim.Plan
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return &p, errOut.String()
}

func podOf(t *testing.T, p *sim.Plan, ns, name string) sim.PodPlan {
	t.Helper()
	for _, pp := range p.Pods {
		if pp.Namespace == ns && pp.Name == name {
			return pp
		}
	}
	t.Fatalf("pending pod %s/%s not in the plan: %+v", ns, name, p.Pods)
	return sim.PodPlan{}
}

// One added one-card node places the pod no existing card can hold; the pod whose
// queue is at its capability stays pending with and without it, for the queue's
// reason: more nodes do not help it.
func TestOneAddedNodePlacesWhatTheClusterCannotAndNotWhatItsQueueForbids(t *testing.T) {
	p, stderr := planOf(t, "--from-cluster", "--add-nodes", "1", "--node-shape", "A100x1")
	if len(p.Pods) != 2 {
		t.Fatalf("%d pending vGPU pods in the plan, want 2 (small, capped-run-1): %+v\nstderr: %s", len(p.Pods), p.Pods, stderr)
	}
	small := podOf(t, p, "team-a", "small")
	if small.AsIs.Placed {
		t.Errorf("small placed as is on %s %v: card 1 has 30960 MiB free, it asks 35000", small.AsIs.Node, small.AsIs.Cards)
	}
	if !small.WithAdded.Placed || small.WithAdded.Node != p.AddedNodes[0] || len(small.WithAdded.Cards) != 1 {
		t.Errorf("small with one added A100: %+v, want placed on %s", small.WithAdded, p.AddedNodes[0])
	}
	capped := podOf(t, p, "team-b", "capped-run-1")
	for side, o := range map[string]sim.Outcome{"as is": capped.AsIs, "with the added node": capped.WithAdded} {
		if o.Placed {
			t.Errorf("capped-run-1 placed %s on %s: its queue holds its whole capability", side, o.Node)
		} else if !strings.Contains(o.Reason, "queue") {
			t.Errorf("capped-run-1 pending %s for %q, which does not name its queue", side, o.Reason)
		}
	}
	if capped.MinMember != 1 || capped.Job != "team-b/capped-run" {
		t.Errorf("capped-run-1's gang: %s (%d), want team-b/capped-run (1)", capped.Job, capped.MinMember)
	}
	if p.AsIs.Placed != 0 || p.WithAdded.Placed != 1 || p.WithAdded.Gangs != 1 {
		t.Errorf("tallies: as is %+v, with added %+v; want 0 and 1 placed (1 gang)", p.AsIs, p.WithAdded)
	}
	if got, want := p.Headline(), "1 more A100x1 nodes place 1 of 2 pending vGPU pods (1 gangs)"; got != want {
		t.Errorf("headline %q, want %q", got, want)
	}
}

// Without added nodes the same cluster places neither pod: the added node is what
// places small.
func TestZeroAddedNodesPlaceNothingHere(t *testing.T) {
	p, _ := planOf(t, "--from-cluster")
	if p.Added != 0 || p.AsIs.Placed != 0 || p.AsIs.Pending != 2 {
		t.Errorf("plan without added nodes: added %d, as is %+v; want nothing placed of 2", p.Added, p.AsIs)
	}
}

// The text puts both runs side by side and ends with the answer.
func TestTextShowsBothRunsSideBySide(t *testing.T) {
	kube, vc := liveCluster(t)
	var out, errOut bytes.Buffer
	if err := simulateMain(context.Background(), testEnv(kube, vc, &out, &errOut),
		[]string{"--from-cluster", "--node-shape", "A100x1"}); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	text := out.String()
	t.Logf("tessera simulate --from-cluster --node-shape A100x1\n%s", text)
	for _, want := range []string{"AS IS", "WITH 1 MORE A100x1", "team-a/small", "added-a100x1-0 cards 0",
		"Why pending, as is:", "As is, the cluster places 0 of 2 pending vGPU pods (0 gangs).",
		"1 more A100x1 nodes place 1 of 2 pending vGPU pods (1 gangs)."} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestBadFlagValuesGetSpecificErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-cluster", "--node-shape", "H100x0"}, `node shape "H100x0": COUNT "0" must be a whole number in 1..16`},
		{[]string{"--from-cluster", "--node-shape", "V100x8"}, `node shape "V100x8": unknown MODEL "v100"`},
		{[]string{"--from-cluster", "--node-shape", "dgx"}, `node shape "dgx": want a machine name or MODELxCOUNT`},
		{[]string{"--from-cluster", "--add-nodes", "-2", "--node-shape", "dgxa100"}, "--add-nodes -2: want a whole number in 0..500"},
		{[]string{"--from-cluster", "--add-nodes", "3"}, "--add-nodes 3 needs --node-shape"},
		{[]string{"--add-nodes", "3", "--node-shape", "dgxa100"}, "need --from-cluster"},
		{[]string{"--from-cluster", "-f", "x.yaml"}, `-f "x.yaml" and --from-cluster`},
		{[]string{"--from-cluster", "-o", "yaml"}, `-o "yaml": want text or json`},
		{[]string{"--from-cluster", "--add-nodes", "two"}, `invalid argument "two" for "--add-nodes"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			kube, vc := liveCluster(t)
			var out, errOut bytes.Buffer
			err := simulateMain(context.Background(), testEnv(kube, vc, &out, &errOut), tc.args)
			if !errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

// A named machine is accepted and adds its cards.
func TestNamedShapeAddsItsCards(t *testing.T) {
	p, _ := planOf(t, "--from-cluster", "--add-nodes", "2", "--node-shape", "dgxa100")
	if fmt.Sprint(p.AddedNodes) != "[added-dgxa100-0 added-dgxa100-1]" {
		t.Errorf("added nodes %v", p.AddedNodes)
	}
	if !podOf(t, p, "team-a", "small").WithAdded.Placed {
		t.Errorf("small not placed with two DGX A100s added")
	}
}

// The plugin's arguments come from the scheduler's running conf, found as explain
// finds it: with card memory oversubscribed twice over, card 1's 71920 schedulable
// MiB left hold small as the cluster is.
func TestTheSchedulersConfShapesThePlan(t *testing.T) {
	conf := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tessera-system", Name: "gpu-scheduler-conf", Labels: map[string]string{
			"app.kubernetes.io/component": "scheduler", "helm.sh/chart": "tessera-0.2.0"}},
		Data: map[string]string{cli.ConfKey: "actions: \"enqueue, allocate, reclaim, preempt\"\ntiers:\n- plugins:\n  - name: vgpu\n" +
			"    arguments:\n      vgpu.MemoryOversubscription: 2.0\n"}}
	p, stderr := planOfCluster(t, []runtime.Object{conf}, "--from-cluster")
	if p.SchedulerConf != "ConfigMap tessera-system/gpu-scheduler-conf" {
		t.Errorf("conf read from %q; stderr: %s", p.SchedulerConf, stderr)
	}
	if small := podOf(t, p, "team-a", "small"); !small.AsIs.Placed || small.AsIs.Node != "gpu-a" || small.AsIs.Cards[0] != 1 {
		t.Errorf("small as is with memory oversubscribed 2x: %+v, want placed on gpu-a card 1", small.AsIs)
	}
}
