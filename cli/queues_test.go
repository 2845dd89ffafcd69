package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// TestExplainModelsTheQueueShare: queue prod (weight 3) holds all eight cards of two
// nodes; queue research (weight 1) has one whole-card pod pending. Its share is the
// 100 cores it asks for (less than its weighted 200), prod's the other 700, so
// research is below its share and prod's eight pods are what reclaim may evict for it.
func TestExplainModelsTheQueueShare(t *testing.T) {
	var pods []corev1.Pod
	snap := &Snapshot{Args: pluginargs.Defaults(), Now: now,
		Queues: []QueueSpec{{Name: "prod", Weight: 3, Capability: fairshare.Unlimited}, {Name: "research", Weight: 1, Capability: fairshare.Unlimited}}}
	for _, n := range []string{"gpu-a", "gpu-b"} {
		var cards []api.Card
		for i := 0; i < 4; i++ {
			uuid := fmt.Sprintf("GPU-%s%d", n, i)
			cards = append(cards, card(uuid, i, "NVIDIA A100-SXM4-40GB", 40960))
			p := placed(t, vgpuPod("prod", fmt.Sprintf("train-%s-%d", n, i), "prod", 1, 40960, 100), n, api.QoSFixedShare, api.HandoffDone,
				api.CardAssignment{UUID: uuid, MemoryMiB: 40960, Cores: 100})
			pods = append(pods, *p)
		}
		snap.Nodes = append(snap.Nodes, *tesseraNode(t, n, now, cards...))
	}
	pending := vgpuPod("lab", "notebook", "research", 1, 40960, 100)
	snap.Pods = append(pods, *pending)

	v := snap.Explain(pending)
	if v.Queue == nil {
		t.Fatalf("explain has no queue view: %+v", v)
	}
	q := v.Queue
	if q.Deserved.Cores != 100 || q.Held.Cores != 0 || q.Asked.Cores != 100 || !q.Below || q.TotalWeight != 4 {
		t.Errorf("research's view: %+v, want deserved 100, held 0, asked 100 cores, below its share, total weight 4", q)
	}
	if q.Reclaimable["prod"] != 8 {
		t.Errorf("reclaimable %v, want prod's 8 pods", q.Reclaimable)
	}
	var out bytes.Buffer
	if err := WriteExplain(&out, v); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"queue research (weight 1 of 4): holds 0 of its 100 deserved card cores",
		"queue research is below its share: reclaim may evict for it among the 8 vGPU pods of queue prod",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain says\n%s\nwant a line with %q", out.String(), want)
		}
	}

	// prod's own pending pod: prod is at (past) its share; reclaim does not act for it.
	more := vgpuPod("prod", "train-more", "prod", 1, 40960, 100)
	snap.Pods = append(snap.Pods, *more)
	out.Reset()
	if err := WriteExplain(&out, snap.Explain(more)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "queue prod is at its share") {
		t.Errorf("explain for prod's pod says\n%s\nwant it at its share", out.String())
	}
}

func TestDecodeQueues(t *testing.T) {
	raw := []byte(`{"items":[{"metadata":{"name":"research"},"spec":{"weight":1,"capability":{"volcano.sh/vgpu-cores":"400","cpu":"8"},
		"guarantee":{"resource":{"volcano.sh/vgpu-memory":"81920"}}}},{"metadata":{"name":"default"},"spec":{"weight":1}}]}`)
	qs, err := decodeQueues(raw, api.ResourceMemory, api.ResourceCores)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "default" || qs[1].Name != "research" {
		t.Fatalf("queues %+v, want default and research", qs)
	}
	r := qs[1]
	if r.Capability.Cores != 400 || r.Guarantee.MemoryMiB != 81920 || r.Weight != 1 || qs[0].Capability != fairshare.Unlimited {
		t.Errorf("research read as %+v, default as %+v", r, qs[0])
	}
	if _, err := decodeQueues([]byte(`{"items":[{"spec":{"weight":"heavy"}}]}`), api.ResourceMemory, api.ResourceCores); err == nil {
		t.Error("a malformed queue list was accepted")
	}
}

// TestExplainChargesIdleOnlyPodsWholeCards: as the scheduler does (fairshare.Cards),
// explain charges a pod that asked for idle cards only each card whole. Queue greedy's
// running idle-only pod asked 1 MiB and 1% and holds card 0 of gpu-a; its pending one
// asks the same. Both count for a whole A100 (40960 MiB, 100 cores): greedy holds 100
// cores of the 100 it deserves beside fair's pending whole card, so it is at its share.
func TestExplainChargesIdleOnlyPodsWholeCards(t *testing.T) {
	idle := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
		return p
	}
	snap := &Snapshot{Args: pluginargs.Defaults(), Now: now,
		Queues: []QueueSpec{{Name: "greedy", Weight: 1, Capability: fairshare.Unlimited}, {Name: "fair", Weight: 1, Capability: fairshare.Unlimited}},
		Nodes: []corev1.Node{*tesseraNode(t, "gpu-a", now, card("GPU-a0", 0, "NVIDIA A100-SXM4-40GB", 40960),
			card("GPU-a1", 1, "NVIDIA A100-SXM4-40GB", 40960))}}
	held := placed(t, idle(vgpuPod("lab", "tiny", "greedy", 1, 1, 1)), "gpu-a", api.QoSFixedShare, api.HandoffDone,
		api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 1, Cores: 1})
	more := idle(vgpuPod("lab", "more", "greedy", 1, 1, 1))
	snap.Pods = []corev1.Pod{*held, *more, *vgpuPod("lab", "whole", "fair", 1, 40960, 100)}
	q := snap.Explain(more).Queue
	if q == nil {
		t.Fatal("explain has no queue view")
	}
	whole := Amount{MemoryMiB: 40960, Cores: 100}
	if q.Held != whole || q.Asked != whole {
		t.Errorf("greedy holds %+v and asks %+v, want a whole card each (%+v)", q.Held, q.Asked, whole)
	}
	if q.Deserved.Cores != 100 || q.Below {
		t.Errorf("greedy deserves %+v (below %v), want 100 cores and at its share", q.Deserved, q.Below)
	}
	// The same pods without idle-only are charged what they ask.
	delete(held.Annotations, api.AnnotationCardPolicy)
	delete(more.Annotations, api.AnnotationCardPolicy)
	snap.Pods = []corev1.Pod{*held, *more, *vgpuPod("lab", "whole", "fair", 1, 40960, 100)}
	if q := snap.Explain(more).Queue; q.Held != (Amount{MemoryMiB: 1, Cores: 1}) || q.Asked != (Amount{MemoryMiB: 1, Cores: 1}) || !q.Below {
		t.Errorf("shared: greedy holds %+v, asks %+v (below %v), want 1 MiB and 1 core each, below its share", q.Held, q.Asked, q.Below)
	}
}
