package vgpu

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// BenchmarkPlanMIGRepartitions is one session's choice of re-partitions on 1,000
// opted-in nodes of 8 idle H100s, each split into two 3g.40gb, with 4,000 pending pods
// asking for 2g.20gb and 1g.20gb instances that no card has: every node gets a plan.
// It reports the plans chosen per second, four ways side by side:
//
//   - choose: the chooser alone, on views built beforehand, pods without limits;
//   - read-warm+choose: also reading the 1,000 Nodes' annotations (inventory, MIG
//     layout, plan and status) into the chooser's view, through decoders that have
//     seen them before, as the plugin's do for nodes unchanged since the last session;
//   - read-cold+choose: the same, decoding every annotation as if all had changed;
//   - choose-selector: every pod pinned by a node selector to one node (four pods a
//     node, 1,000 distinct selectors: each node judged for each selector);
//   - choose-filtered: every pod with a GPU type filter that every card passes.
func BenchmarkPlanMIGRepartitions(b *testing.B) {
	const nodes = 1000
	now := time.Now()
	var objs []*corev1.Node
	for n := 0; n < nodes; n++ {
		node := benchMIGNode(fmt.Sprintf("node-%04d", n), benchCards, benchCards, true)
		node.Labels["kubernetes.io/hostname"] = node.Name
		objs = append(objs, node)
	}
	warm := &api.Decoders{}
	read := func(b *testing.B, dec *api.Decoders) []migNodeView {
		views := make([]migNodeView, 0, len(objs))
		for _, node := range objs {
			inv, err := dec.NodeInventory(node, now, time.Minute)
			if err != nil || inv == nil {
				b.Fatalf("node %s: inventory %v, %v", node.Name, inv, err)
			}
			n := placement.NewNode(node.Name, inv, 1)
			views = append(views, migNodeOf(n, readMIGNodePlan(node), false, node.Spec.Unschedulable, now))
		}
		return views
	}
	views := read(b, warm)
	demand := func(where func(i int) *migPodLimits) []migDemand {
		var out []migDemand
		for i := 0; i < 4*nodes; i++ {
			p := "2g.20gb"
			if i%2 == 1 {
				p = "1g.20gb"
			}
			out = append(out, migDemand{Profile: p, Job: fmt.Sprint("job-", i), Pod: fmt.Sprint("ns/pod-", i), Where: where(i)})
		}
		return out
	}
	plain := demand(func(int) *migPodLimits { return nil })
	selectors := make([]*migPodLimits, nodes)
	for n := range selectors {
		selectors[n] = migLimitsBook{}.of(&corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{
			"kubernetes.io/hostname": fmt.Sprintf("node-%04d", n)}}}, &api.PodOptions{})
	}
	pinned := demand(func(i int) *migPodLimits { return selectors[i/4] })
	typed := migLimitsBook{}.of(&corev1.Pod{}, &api.PodOptions{TypeInclude: []string{"h100"}})
	filtered := demand(func(int) *migPodLimits { return typed })
	for _, tc := range []struct {
		name   string
		read   bool
		dec    *api.Decoders
		demand []migDemand
	}{{"choose", false, nil, plain}, {"read-warm+choose", true, warm, plain}, {"read-cold+choose", true, nil, plain},
		{"choose-selector", false, nil, pinned}, {"choose-filtered", false, nil, filtered}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			plans := 0
			for i := 0; i < b.N; i++ {
				v := views
				if tc.read {
					v = read(b, tc.dec)
				}
				got := chooseMIGPlans(v, tc.demand)
				if len(got) != nodes {
					b.Fatalf("%d plans, want one per node", len(got))
				}
				plans += len(got)
			}
			b.ReportMetric(float64(plans)/b.Elapsed().Seconds(), "plans/s")
		})
	}
}
