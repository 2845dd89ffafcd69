package vgpu

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/framework"
)

// BenchmarkSessionGrowth measures how one allocate session grows with the cluster and
// the queue: 250, 500 and 1,000 nodes of 8 cards, 250, 500 and 1,000 pending vGPU tasks
// (BenchmarkSession's mix, gangs of four), with no device plugin and with Tessera's
// vgpu plugin, in wall and CPU time. docs/benchmarks.md projects 10,000 nodes from it.
//
//	go test -run '^$' -bench SessionGrowth -benchtime 1x ./plugins/vgpu
func BenchmarkSessionGrowth(b *testing.B) {
	for _, nodes := range []int{250, 500, 1000} {
		for _, tasks := range []int{250, 500, 1000} {
			for _, mode := range []string{"none", "tessera"} {
				b.Run(fmt.Sprintf("nodes=%d/tasks=%d/%s", nodes, tasks, mode), func(b *testing.B) {
					var placed int
					var cpu time.Duration
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						testSched = NewScheduler()
						sc := benchCache(b, nodes, tasks)
						stop := make(chan struct{})
						sc.Run(stop)
						framework.CleanupPluginBuilders()
						registerBenchPlugins()
						t := benchTiers(mode)
						// The previous cluster's garbage is not this session's cost.
						runtime.GC()
						before := processCPU(b)
						b.StartTimer()

						ssn := framework.OpenSession(sc, t, nil)
						act := allocate.New()
						act.Initialize()
						act.Execute(ssn)
						act.UnInitialize()
						b.StopTimer()
						cpu += processCPU(b) - before
						placed, _, _ = countPlacements(b, ssn, mode, sc)
						framework.CloseSession(ssn)
						close(stop)
						b.StartTimer()
					}
					b.ReportMetric(float64(placed), "tasks-placed")
					// CPU time is steadier than wall time on a shared machine: compare these.
					b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
				})
			}
		}
	}
}
