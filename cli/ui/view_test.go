package ui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// prodCluster: queue prod (weight 3) holds all eight whole cards of gpu-a and gpu-b;
// queue research (weight 1) has one whole-card pod pending.
func prodCluster(t *testing.T) *contents {
	in := &contents{queues: []*unstructured.Unstructured{volcanoQueue("prod", 3, nil), volcanoQueue("research", 1, nil)}}
	for _, n := range []string{"gpu-a", "gpu-b"} {
		var cards []api.Card
		for i := 0; i < 4; i++ {
			uuid := fmt.Sprintf("GPU-%s%d", n, i)
			cards = append(cards, card(uuid, i))
			in.pods = append(in.pods, placed(t, vgpuPod("prod", fmt.Sprintf("train-%s-%d", n, i), "prod", "train", 1, 40960, 100), n,
				api.CardAssignment{UUID: uuid, MemoryMiB: 40960, Cores: 100}))
		}
		in.nodes = append(in.nodes, gpuNode(t, n, cards...))
	}
	in.pods = append(in.pods, vgpuPod("lab", "notebook", "research", "notebook-pg", 1, 40960, 100))
	return in
}

func TestTheCardMapIsTheReportOfTheCachedCluster(t *testing.T) {
	in := prodCluster(t)
	v := buildView(in, pluginargs.Defaults(), time.Now(), nil)
	if got := v.Cards.Totals; got.Nodes != 2 || got.Cards != 8 || got.BusyCards != 8 {
		t.Errorf("totals %+v, want 2 nodes, 8 cards, 8 busy", got)
	}
	c := v.Cards.Nodes[0].Cards[2]
	if c.UUID != "GPU-gpu-a2" || len(c.Pods) != 1 || c.Pods[0].Pod != "train-gpu-a-2" || c.Pods[0].Queue != "prod" {
		t.Errorf("gpu-a card 2: %+v, want train-gpu-a-2 of queue prod on it", c)
	}
}

// The page's queue shares must be the CLI's: `tessera explain` shows the same numbers
// for a pending pod's queue.
func TestQueueSharesAgreeWithExplain(t *testing.T) {
	in := prodCluster(t)
	args := pluginargs.Defaults()
	v := buildView(in, args, time.Now(), nil)
	if len(v.Queues) != 2 {
		t.Fatalf("queues %+v, want prod and research", v.Queues)
	}
	prod, research := v.Queues[0], v.Queues[1]
	if research.Deserved.Cores != 100 || research.Held.Cores != 0 || research.Asked.Cores != 100 || !research.Below || research.TotalWeight != 4 {
		t.Errorf("research: %+v, want deserved 100, held 0, asked 100 cores, below its share, total weight 4", research)
	}
	if prod.Deserved.Cores != 700 || prod.Held.Cores != 800 || !prod.Over || prod.Running != 8 {
		t.Errorf("prod: %+v, want deserved 700 and held 800 cores (over its share), 8 running", prod)
	}
	if research.Capability.Cores != -1 || research.Capability.MemoryMiB != -1 {
		t.Errorf("research's capability %+v, want -1 (unlimited) in JSON", research.Capability)
	}

	snap := snapshotOf(in, args)
	explained := snap.Explain(snap.FindPod("lab", "notebook")).Queue
	if explained == nil {
		t.Fatal("explain has no queue view")
	}
	got := Amount{MemoryMiB: explained.Deserved.MemoryMiB, Cores: explained.Deserved.Cores}
	if got != research.Deserved || explained.Below != research.Below {
		t.Errorf("explain says research deserves %+v (below %v), the page %+v (below %v)", got, explained.Below, research.Deserved, research.Below)
	}
}

func TestQueuesReadTheirCardCapability(t *testing.T) {
	qs := decodeQueues([]*unstructured.Unstructured{
		volcanoQueue("capped", 2, map[string]any{api.ResourceCores: "400", api.ResourceMemory: "81920", "cpu": "8"}),
	}, pluginargs.Defaults())
	if len(qs) != 1 || qs[0].spec.Weight != 2 || qs[0].spec.Capability.Cores != 400 || qs[0].spec.Capability.MemoryMiB != 81920 || qs[0].state != "Open" {
		t.Errorf("decoded %+v, want weight 2, capability 400 cores and 81920 MiB, state Open", qs)
	}
}

func TestPendingSaysWhy(t *testing.T) {
	const vgpuWords = "0/2 nodes are unavailable: 2 vgpu: no card has 50000 MiB free."
	const gangWords = "1/1 tasks in gang unschedulable: vgpu: no node has 9 cards"
	cases := []struct {
		name     string
		pods     []*corev1.Pod
		groups   []*unstructured.Unstructured
		wantName string
		wantFrom string
		wantText string
	}{
		{name: "a pod's own PodScheduled message comes before its gang's",
			pods:     []*corev1.Pod{unschedulable(vgpuPod("ml", "big-0", "research", "big-pg", 1, 50000, 30), vgpuWords)},
			groups:   []*unstructured.Unstructured{volcanoPodGroup("ml", "big-pg", "big", "research", "Inqueue", 1, 1, gangWords)},
			wantName: "big-0", wantFrom: FromPod, wantText: "Unschedulable: " + vgpuWords},
		{name: "a pod without a condition of its own carries its gang's reason",
			pods:     []*corev1.Pod{vgpuPod("ml", "wide-0", "research", "wide-pg", 9, 1000, 10)},
			groups:   []*unstructured.Unstructured{volcanoPodGroup("ml", "wide-pg", "wide", "research", "Inqueue", 1, 9, gangWords)},
			wantName: "wide-0", wantFrom: FromPodGroup, wantText: "NotEnoughResources: " + gangWords},
		{name: "a pod of an admitted gang that has no reason yet says it waits for the scheduler",
			pods:     []*corev1.Pod{vgpuPod("ml", "new-0", "research", "new-pg", 1, 1000, 10)},
			groups:   []*unstructured.Unstructured{volcanoPodGroup("ml", "new-pg", "new", "research", "Inqueue", 1, 1, "")},
			wantName: "new-0", wantFrom: FromPhase, wantText: admittedState},
		{name: "a gang its queue has not admitted is listed although its pods do not exist",
			groups:   []*unstructured.Unstructured{volcanoPodGroup("ml", "held-pg", "held", "research", "Pending", 4, 8, "")},
			wantName: "held-pg", wantFrom: FromPhase, wantText: notAdmitted},
		{name: "an unreadable request is said in the plugin's words",
			pods: []*corev1.Pod{func() *corev1.Pod {
				p := vgpuPod("ml", "odd-0", "research", "odd-pg", 1, 1000, 10)
				p.Annotations[api.AnnotationNodePolicy] = "sideways"
				return p
			}()},
			wantName: "odd-0", wantFrom: FromInvalid, wantText: "vgpu: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := &contents{nodes: []*corev1.Node{gpuNode(t, "gpu-a", card("GPU-0", 0))}, pods: c.pods, podGroups: c.groups}
			v := buildView(in, pluginargs.Defaults(), time.Now(), nil)
			if len(v.Pending) != 1 {
				t.Fatalf("pending %+v, want one entry", v.Pending)
			}
			p := v.Pending[0]
			if p.Name != c.wantName || p.From != c.wantFrom || !strings.HasPrefix(p.Reason, c.wantText) {
				t.Errorf("pending %+v, want %s with reason from %s starting %q", p, c.wantName, c.wantFrom, c.wantText)
			}
		})
	}
}

func TestBoundAndCPUOnlyPodsAreNotPending(t *testing.T) {
	in := prodCluster(t)
	in.pods = append(in.pods, &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}})
	in.pods[0].Status.Phase = corev1.PodPending // bound, not yet running: not waiting for cards
	v := buildView(in, pluginargs.Defaults(), time.Now(), nil)
	if len(v.Pending) != 1 || v.Pending[0].Name != "notebook" || v.Pending[0].Asks != "main: 1 × 40960 MiB, 100% cores" {
		t.Errorf("pending %+v, want notebook alone, asking main: 1 × 40960 MiB, 100%% cores", v.Pending)
	}
}

// The page charges an idle-only pod each card whole, as explain and the scheduler do:
// a running idle-only pod that asked 1 MiB and 1% holds a whole A100.
func TestQueueSharesChargeIdleOnlyPodsWholeCards(t *testing.T) {
	in := &contents{queues: []*unstructured.Unstructured{volcanoQueue("greedy", 1, nil), volcanoQueue("fair", 1, nil)},
		nodes: []*corev1.Node{gpuNode(t, "gpu-a", card("GPU-a0", 0), card("GPU-a1", 1))}}
	tiny := vgpuPod("lab", "tiny", "greedy", "tiny-pg", 1, 1, 1)
	tiny.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
	more := vgpuPod("lab", "more", "greedy", "more-pg", 1, 1, 1)
	more.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
	in.pods = []*corev1.Pod{placed(t, tiny, "gpu-a", api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 1, Cores: 1}), more,
		vgpuPod("lab", "whole", "fair", "whole-pg", 1, 40960, 100)}
	args := pluginargs.Defaults()
	v := buildView(in, args, time.Now(), nil)
	var greedy *QueueShare
	for i := range v.Queues {
		if v.Queues[i].Queue == "greedy" {
			greedy = &v.Queues[i]
		}
	}
	whole := Amount{MemoryMiB: 40960, Cores: 100}
	if greedy == nil || greedy.Held != whole || greedy.Asked != whole || greedy.Deserved.Cores != 100 || greedy.Below {
		t.Fatalf("greedy: %+v, want held and asked a whole card each (%+v), 100 cores deserved, at its share", greedy, whole)
	}

	snap := snapshotOf(in, args)
	explained := snap.Explain(snap.FindPod("lab", "more")).Queue
	if explained == nil {
		t.Fatal("explain has no queue view")
	}
	if got := (Amount{MemoryMiB: explained.Held.MemoryMiB, Cores: explained.Held.Cores}); got != greedy.Held {
		t.Errorf("explain says greedy holds %+v, the page %+v", got, greedy.Held)
	}
}

// snapshotOf is the CLI's snapshot of the cluster the page is built from, for comparing
// the page with `tessera explain`.
func snapshotOf(in *contents, args pluginargs.Args) *cli.Snapshot {
	snap := &cli.Snapshot{Args: args, Now: time.Now()}
	for _, n := range in.nodes {
		snap.Nodes = append(snap.Nodes, *n)
	}
	for _, p := range in.pods {
		snap.Pods = append(snap.Pods, *p)
	}
	for _, q := range decodeQueues(in.queues, args) {
		snap.Queues = append(snap.Queues, q.spec)
	}
	return snap
}
