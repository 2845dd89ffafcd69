package vgpu

import (
	"fmt"
	"testing"

	"github.com/tessera-gpu/tessera/placement/mig"
)

// BenchmarkPlanMIGRepartitions is one session's choice of re-partitions on 1,000
// opted-in nodes of 8 idle H100s, each split into two 3g.40gb, with 4,000 pending pods
// asking for 2g.20gb and 1g.20gb instances that no card has: every node gets a plan.
// It reports the plans chosen per second of the chooser's time.
func BenchmarkPlanMIGRepartitions(b *testing.B) {
	var nodes []migNodeView
	for n := 0; n < 1000; n++ {
		v := migNodeView{Name: fmt.Sprintf("node-%04d", n), OptedIn: true}
		for c := 0; c < 8; c++ {
			v.Cards = append(v.Cards, migCardView{UUID: fmt.Sprintf("GPU-%d-%d", n, c), Index: c, Model: "NVIDIA H100 80GB HBM3",
				Current: mig.Geometry{{Profile: "3g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 4}}, Plannable: true})
		}
		nodes = append(nodes, v)
	}
	var demand []migDemand
	for i := 0; i < 4000; i++ {
		p := "2g.20gb"
		if i%2 == 1 {
			p = "1g.20gb"
		}
		demand = append(demand, migDemand{Profile: p, Job: fmt.Sprint("job-", i), Pod: fmt.Sprint("ns/pod-", i)})
	}
	plans := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got := chooseMIGPlans(nodes, demand)
		if len(got) != 1000 {
			b.Fatalf("%d plans, want one per node", len(got))
		}
		plans += len(got)
	}
	b.ReportMetric(float64(plans)/b.Elapsed().Seconds(), "plans/s")
}
