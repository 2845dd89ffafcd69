package ui

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// migQueues is one H100 node with both cards in MIG mode (card 0 seven 1g.10gb, card 1
// two 3g.40gb: 13 MIG slices of supply, what the instances hold) and a plain A100 node. Queue light (weight 1)
// holds a 3g.40gb and four 1g.10gb (7 slices) and asks for two 3g.40gb more; heavy
// (weight 3) holds one 1g.10gb and asks for ten; prod (weight 1) holds a plain card and
// no instance. Divided 3:1, heavy deserves 9.75 slices and light 3.25: light holds more
// than its share, heavy less.
func migQueues(t *testing.T) *contents {
	const h100 = "NVIDIA H100 80GB HBM3"
	in := &contents{queues: []*unstructured.Unstructured{volcanoQueue("heavy", 3, nil), volcanoQueue("light", 1, nil), volcanoQueue("prod", 1, nil)}}
	m0 := api.Card{UUID: "GPU-m0", Index: 0, Model: h100, MemoryMiB: 81559, Shares: 4, Healthy: true, MIG: true}
	m1 := m0
	m1.UUID, m1.Index = "GPU-m1", 1
	layout := &api.NodeMIGInstances{Cards: map[string][]api.MIGInstance{
		"GPU-m1": {{UUID: "MIG-m1-a", Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40320},
			{UUID: "MIG-m1-b", Profile: "3g.40gb", GI: 2, Start: 4, Size: 4, MemoryMiB: 40320}}}}
	for i := 0; i < 7; i++ {
		layout.Cards["GPU-m0"] = append(layout.Cards["GPU-m0"], api.MIGInstance{UUID: fmt.Sprintf("MIG-m0-%d", i), Profile: "1g.10gb",
			GI: i + 1, Start: i, Size: 1, MemoryMiB: 9856})
	}
	node := gpuNode(t, "gpu-m", m0, m1)
	s, err := api.EncodeMIGInstances(layout)
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations[api.AnnotationMIGInstances] = s
	in.nodes = []*corev1.Node{node, gpuNode(t, "gpu-a", card("GPU-a0", 0))}

	mig := func(queue, name, profile string) *corev1.Pod {
		p := vgpuPod(queue, name, queue, name+"-pg", 1, 1, 1)
		delete(p.Spec.Containers[0].Resources.Limits, api.ResourceMemory)
		delete(p.Spec.Containers[0].Resources.Limits, api.ResourceCores)
		p.Annotations[api.AnnotationMIGProfile] = profile
		return p
	}
	in.pods = append(in.pods, placed(t, mig("light", "big-held", "3g.40gb"), "gpu-m",
		api.CardAssignment{UUID: "GPU-m1", MemoryMiB: 40320, Cores: 100, MIG: "MIG-m1-a"}))
	for i := 0; i < 4; i++ {
		in.pods = append(in.pods, placed(t, mig("light", fmt.Sprintf("small-held-%d", i), "1g.10gb"), "gpu-m",
			api.CardAssignment{UUID: "GPU-m0", MemoryMiB: 9856, Cores: 100, MIG: fmt.Sprintf("MIG-m0-%d", i)}))
	}
	in.pods = append(in.pods, placed(t, mig("heavy", "held", "1g.10gb"), "gpu-m",
		api.CardAssignment{UUID: "GPU-m0", MemoryMiB: 9856, Cores: 100, MIG: "MIG-m0-4"}))
	for i := 0; i < 10; i++ {
		in.pods = append(in.pods, mig("heavy", fmt.Sprintf("more-%d", i), "1g.10gb"))
	}
	for i := 0; i < 2; i++ {
		in.pods = append(in.pods, mig("light", fmt.Sprintf("big-%d", i), "3g.40gb"))
	}
	in.pods = append(in.pods, placed(t, vgpuPod("prod", "train", "prod", "train-pg", 1, 40960, 100), "gpu-a",
		api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 40960, Cores: 100}))
	return in
}

// The page's queue panel shows MIG slices for the queues that hold or ask for MIG
// instances, with the numbers `tessera explain` gives (which
// cli.TestExplainQueueMIGSlicesAgreeWithTheScheduler holds to the scheduler's), and
// none for a queue without instances.
func TestQueueMIGSlicesAgreeWithExplain(t *testing.T) {
	in := migQueues(t)
	args := pluginargs.Defaults()
	v := buildView(in, args, time.Now(), nil)
	byName := map[string]QueueShare{}
	for _, q := range v.Queues {
		byName[q.Queue] = q
	}
	heavy, light, prod := byName["heavy"], byName["light"], byName["prod"]
	if !heavy.MIG || heavy.Held.MIGSlices != 1 || heavy.Asked.MIGSlices != 10 || heavy.Deserved.MIGSlices != 9.75 || !heavy.Below {
		t.Errorf("heavy %+v; want MIG shown, 1 held, 10 asked, 9.75 deserved MIG slices, below its share", heavy)
	}
	if !light.MIG || light.Held.MIGSlices != 7 || light.Asked.MIGSlices != 6 || light.Deserved.MIGSlices != 3.25 || !light.Over || light.Below {
		t.Errorf("light %+v; want MIG shown, 7 held, 6 asked, 3.25 deserved MIG slices, above its share", light)
	}
	if prod.MIG || prod.Held.Cores != 100 || prod.Capability.MIGSlices != 0 {
		t.Errorf("prod %+v; want no MIG slices shown, its plain card held", prod)
	}
	raw, err := json.Marshal(prod)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "mig") {
		t.Errorf("a queue without MIG instances reads %s; want no MIG fields", raw)
	}

	snap := snapshotOf(in, args)
	for name, pod := range map[string][2]string{"heavy": {"heavy", "more-0"}, "light": {"light", "big-0"}} {
		explained := snap.Explain(snap.FindPod(pod[0], pod[1])).Queue
		if explained == nil {
			t.Fatalf("explain has no queue view for %s", name)
		}
		page := byName[name]
		got := [3]float64{explained.Held.MIGSlices, explained.Asked.MIGSlices, explained.Deserved.MIGSlices}
		want := [3]float64{page.Held.MIGSlices, page.Asked.MIGSlices, page.Deserved.MIGSlices}
		if got != want || explained.Below != page.Below {
			t.Errorf("queue %s: explain holds, asks, deserves %v MIG slices (below %v), the page %v (below %v)", name, got, explained.Below, want, page.Below)
		}
	}
}
