package vgpu

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// benchMIGNode is a node of cards H100 80 GB cards whose first migCards are in MIG
// mode, each split into two 3g.40gb; optedIn says its agent re-partitions.
func benchMIGNode(name string, cards, migCards int, optedIn bool) *corev1.Node {
	n := gpuNode(name, cards, "NVIDIA H100 80GB HBM3", 81559)
	inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	layout := &api.NodeMIGInstances{Cards: map[string][]api.MIGInstance{}}
	for c := 0; c < migCards; c++ {
		inv.Cards[c].MIG = true
		layout.Cards[inv.Cards[c].UUID] = []api.MIGInstance{
			{UUID: fmt.Sprintf("MIG-%s-%d-0", name, c), Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40320},
			{UUID: fmt.Sprintf("MIG-%s-%d-1", name, c), Profile: "3g.40gb", GI: 2, Start: 4, Size: 4, MemoryMiB: 40320},
		}
	}
	if n.Annotations[api.AnnotationInventory], err = api.EncodeInventory(inv); err != nil {
		panic(err)
	}
	if n.Annotations[api.AnnotationMIGInstances], err = api.EncodeMIGInstances(layout); err != nil {
		panic(err)
	}
	if optedIn {
		n.Annotations[api.AnnotationMIGRepartition] = "true"
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	return n
}

// BenchmarkSessionMIG measures one scheduling session (open and allocate, as
// BenchmarkSession) with Tessera's vgpu plugin on 1,000 nodes of 8 cards: one node in
// four has H100s in MIG mode (two 3g.40gb each) and opts in to re-partitioning, the
// rest A100 40 GB cards shared by vGPU. 500 pending tasks in gangs of four, two ways in
// one run:
//
//   - no-mig-pods: every task asks for shares of a card, as in BenchmarkSession;
//   - mig-pods: one gang in five asks for MIG instances instead, alternately a
//     3g.40gb (free on the MIG cards) and a 2g.20gb (no card has one: the session
//     plans re-partitions for them).
//
// Besides wall time it reports the process's CPU time in the timed part (cpu-s/op),
// the tasks placed, the MIG plans announced (the plan writes
// go to nodes the mock's API server does not hold, and fail as not found, in the
// background), and the mig-pods session's wall and CPU time over the no-mig-pods
// session's (x-no-mig, x-no-mig-cpu).
func BenchmarkSessionMIG(b *testing.B) {
	var base, baseCPU float64
	for _, mode := range []string{"no-mig-pods", "mig-pods"} {
		b.Run(mode, func(b *testing.B) {
			var placed, plans int
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				testSched = NewScheduler()
				events := record.NewFakeRecorder(10000)
				sc := benchMIGCache(mode == "mig-pods", events)
				stop := make(chan struct{})
				sc.Run(stop)
				framework.CleanupPluginBuilders()
				registerBenchPlugins()
				t := benchTiers("tessera")
				b.StartTimer()
				cpu0 := processCPU(b)

				ssn := framework.OpenSession(sc, t, nil)
				act := allocate.New()
				act.Initialize()
				act.Execute(ssn)
				act.UnInitialize()
				cpu += processCPU(b) - cpu0
				b.StopTimer()
				placed = 0
				planIDs := map[string]bool{}
				for _, job := range ssn.Jobs {
					for _, task := range job.Tasks {
						if task.NodeName != "" {
							placed++
						}
					}
				}
				for len(events.Events) > 0 {
					if e := <-events.Events; strings.Contains(e, migPlanEvent) {
						if _, id, ok := strings.Cut(e, "(MIG plan "); ok {
							planIDs[id] = true
						}
					}
				}
				plans = len(planIDs)
				framework.CloseSession(ssn)
				close(stop)
				testSched.Close()
				b.StartTimer()
			}
			perOp, cpuPerOp := b.Elapsed().Seconds()/float64(b.N), cpu.Seconds()/float64(b.N)
			if mode == "no-mig-pods" {
				base, baseCPU = perOp, cpuPerOp
			} else if base > 0 {
				b.ReportMetric(perOp/base, "x-no-mig")
				b.ReportMetric(cpuPerOp/baseCPU, "x-no-mig-cpu")
			}
			b.ReportMetric(cpuPerOp, "cpu-s/op")
			b.ReportMetric(float64(placed), "tasks-placed")
			b.ReportMetric(float64(plans), "mig-plans")
		})
	}
}

// benchMIGCache builds BenchmarkSessionMIG's cluster; withMIG gives one gang in five
// MIG pods.
func benchMIGCache(withMIG bool, events record.EventRecorder) *cache.SchedulerCache {
	sc := cache.NewCustomMockSchedulerCache("bench-mig", util.NewFakeBinder(benchTasks*2), util.NewFakeEvictor(0),
		&util.FakeStatusUpdater{}, nil, events)
	for n := 0; n < benchNodes; n++ {
		name := fmt.Sprintf("node-%04d", n)
		if n%4 == 0 {
			sc.AddOrUpdateNode(benchMIGNode(name, benchCards, benchCards, true))
			continue
		}
		sc.AddOrUpdateNode(gpuNode(name, benchCards, "NVIDIA-A100", benchCardMiB))
	}
	sc.AddQueueV1beta1(util.BuildQueue("q1", 1, nil))
	for g := 0; g < benchTasks/benchGangSize; g++ {
		pg := fmt.Sprintf("job-%03d", g)
		sc.AddPodGroupV1beta1(util.BuildPodGroup(pg, "ns", "q1", benchGangSize, nil, schedulingv1.PodGroupInqueue))
		for m := 0; m < benchGangSize; m++ {
			i := g*benchGangSize + m
			name := fmt.Sprintf("%s-%d", pg, m)
			var p *corev1.Pod
			switch {
			case withMIG && g%10 == 1:
				p = migPod(name, pg, "3g.40gb", 1)
			case withMIG && g%10 == 6:
				p = migPod(name, pg, "2g.20gb", 1)
			case i%5 == 0:
				p = vgpuPod(name, pg, 2, 20000, 50, nil)
			case i%5 == 1:
				p = vgpuPod(name, pg, 1, benchCardMiB, 100, nil)
			default:
				p = vgpuPod(name, pg, 1, 10000, 25, nil)
			}
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
			sc.AddPod(p)
		}
	}
	return sc
}
