package vgpu

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1api "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

const (
	evictBenchGangs    = 100
	evictBenchGangSize = 4
	// Each node: four cards held whole by one pod, four shared by two half-card pods;
	// the CPU-only cluster mirrors it with 8-CPU and 4-CPU pods on 64 CPUs.
	evictBenchWhole = 4
	evictBenchHalf  = 4
)

// BenchmarkEvict measures one session of Volcano's reclaim or preempt action on
// 1,000 nodes whose capacity one queue holds entirely, with 100 pending gangs of four
// waiting (reclaim: in a second queue of the same weight; preempt: at a higher
// priority in the same queue), run through the shipped volcano-scheduler.conf. The
// "cpu" cases are the same cluster and workload in CPU only (Volcano's proportion and
// priority choose victims; the vgpu plugin is not in the conf); "tessera" asks for
// cards. Besides time it reports how many tasks were pipelined and
// evicted/needed: the capacity evicted (card cores, or CPU) over the capacity the
// pipelined tasks asked for (1.0 is no waste).
func BenchmarkEvict(b *testing.B) {
	for _, action := range []string{"reclaim", "preempt"} {
		for _, kind := range []string{"cpu", "tessera"} {
			b.Run(kind+"-"+action, func(b *testing.B) {
				var pipelined, evicted int
				var ratio float64
				var cpu time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					sc, stop := evictBenchCache(b, kind == "tessera", action == "preempt")
					actions, tiers, cfg := evictBenchConf(b, kind == "tessera", action)
					testSched = NewScheduler()
					framework.CleanupPluginBuilders()
					for n, fn := range confPlugins(b, tiers) {
						framework.RegisterPluginBuilder(n, fn)
					}
					enableActions(actions)
					before := processCPU(b)
					b.StartTimer()

					ssn := framework.OpenSession(sc, tiers, cfg)
					for _, a := range actions {
						a.Initialize()
						a.Execute(ssn)
						a.UnInitialize()
					}
					b.StopTimer()
					cpu += processCPU(b) - before
					pipelined, evicted, ratio = evictOutcome(b, ssn, kind == "tessera")
					framework.CloseSession(ssn)
					close(stop)
					b.StartTimer()
				}
				b.ReportMetric(float64(pipelined), "tasks-pipelined")
				b.ReportMetric(float64(evicted), "pods-evicted")
				b.ReportMetric(ratio, "evicted/needed")
				// CPU time is steadier than wall time on a shared machine: compare these.
				b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			})
		}
	}
}

// processCPU is the CPU time this process has used (user and system), every thread.
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// evictBenchConf is the shipped conf's tiers (without the vgpu plugin for the CPU-only
// case) and the one action measured.
func evictBenchConf(b testing.TB, withVGPU bool, action string) ([]framework.Action, []conf.Tier, []conf.Configuration) {
	all, tiers, cfg, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(b, "", ""))
	if err != nil {
		b.Fatal(err)
	}
	if !withVGPU {
		// Volcano's stock tiers: without vgpu, and with proportion offering reclaim victims
		// as it does by default (the shipped conf turns that off for card-aware reclaim).
		on := true
		for i := range tiers {
			tiers[i].Plugins = slices.DeleteFunc(tiers[i].Plugins, func(o conf.PluginOption) bool { return o.Name == PluginName })
			for j := range tiers[i].Plugins {
				if tiers[i].Plugins[j].Name == "proportion" {
					tiers[i].Plugins[j].EnabledReclaimable = &on
				}
			}
		}
	}
	for _, a := range all {
		if a.Name() == action {
			return []framework.Action{a}, tiers, cfg
		}
	}
	b.Fatalf("the shipped conf has no %s action", action)
	return nil, nil, nil
}

func evictBenchCache(b testing.TB, cards, preempt bool) (*cache.SchedulerCache, chan struct{}) {
	sc := cache.NewCustomMockSchedulerCache("bench", util.NewFakeBinder(1000), quietEvictor{},
		&util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	for _, pc := range []struct {
		name  string
		value int32
	}{{"low", 10}, {"high", 1000}} {
		sc.AddPriorityClass(&schedulingv1api.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pc.name}, Value: pc.value})
	}
	sc.AddQueueV1beta1(util.BuildQueue("a", 1, nil))
	sc.AddQueueV1beta1(util.BuildQueue("b", 1, nil))
	for n := 0; n < benchNodes; n++ {
		name := fmt.Sprintf("node-%04d", n)
		if cards {
			sc.AddOrUpdateNode(gpuNode(name, benchCards, "NVIDIA-A100", benchCardMiB))
		} else {
			sc.AddOrUpdateNode(cpuNode(name))
		}
		pg := util.BuildPodGroup("run-"+name, "ns", "a", 1, nil, schedulingv1.PodGroupRunning)
		pg.Spec.PriorityClassName = "low"
		sc.AddPodGroupV1beta1(pg)
		m := 0
		add := func(card int, cores int64) {
			p := evictBenchPod(fmt.Sprintf("%s-%d", pg.Name, m), pg.Name, cards, cores, 10)
			p.Spec.NodeName = name
			p.Status.Phase = corev1.PodRunning
			if cards {
				p.Annotations[api.AnnotationAssignment] = fmt.Sprintf(
					`{"version":"v1","node":%q,"qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":"GPU-%s-%d","memoryMiB":%d,"cores":%d}]}]}`,
					name, name, card, benchCardMiB*cores/100, cores)
			}
			sc.AddPod(p)
			m++
		}
		for c := 0; c < evictBenchWhole; c++ {
			add(c, 100)
		}
		for c := evictBenchWhole; c < evictBenchWhole+evictBenchHalf; c++ {
			add(c, 50)
			add(c, 50)
		}
	}
	queue, class := "b", "low"
	if preempt {
		queue, class = "a", "high"
	}
	for g := 0; g < evictBenchGangs; g++ {
		pg := util.BuildPodGroup(fmt.Sprintf("gang-%03d", g), "ns", queue, evictBenchGangSize, nil, schedulingv1.PodGroupInqueue)
		pg.Spec.PriorityClassName = class
		sc.AddPodGroupV1beta1(pg)
		prio := int32(10)
		if preempt {
			prio = 1000
		}
		for m := 0; m < evictBenchGangSize; m++ {
			sc.AddPod(evictBenchPod(fmt.Sprintf("%s-%d", pg.Name, m), pg.Name, cards, 100, prio))
		}
	}
	stop := make(chan struct{})
	sc.Run(stop)
	return sc, stop
}

// evictBenchPod asks for one card at cores% (its memory in proportion), or for the
// same share of a node's 64 CPUs split into eight whole-card-sized slots.
func evictBenchPod(name, pg string, cards bool, cores int64, prio int32) *corev1.Pod {
	var p *corev1.Pod
	if cards {
		p = vgpuPod(name, pg, 1, benchCardMiB*cores/100, cores, nil)
	} else {
		p = cpuPod(name, pg)
		cpu := *resource.NewQuantity(8*cores/100, resource.DecimalSI)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = cpu
	}
	p.Spec.Priority = &prio
	return p
}

// evictOutcome counts the session's pipelined tasks and evicted pods, and the ratio of
// the capacity evicted to the capacity the pipelined tasks need.
func evictOutcome(b *testing.B, ssn *framework.Session, cards bool) (pipelined, evicted int, ratio float64) {
	var needed, freed float64
	size := func(t *vapi.TaskInfo) float64 {
		if cards {
			return float64(t.Pod.Spec.Containers[0].Resources.Limits.Name(api.ResourceCores, resource.DecimalSI).Value())
		}
		return float64(t.Resreq.MilliCPU)
	}
	for _, job := range ssn.Jobs {
		for _, t := range job.Tasks {
			switch t.Status {
			case vapi.Pipelined:
				pipelined++
				needed += size(t)
			case vapi.Releasing:
				evicted++
				freed += size(t)
			}
		}
	}
	if needed == 0 {
		b.Logf("no task was pipelined; %d pods evicted", evicted)
		return pipelined, evicted, 0
	}
	return pipelined, evicted, freed / needed
}

// quietEvictor accepts every eviction silently (Volcano's fake evictor prints each pod
// and blocks once its buffer is full); the session's task states are what is measured.
type quietEvictor struct{}

func (quietEvictor) Evict(*corev1.Pod, string) error { return nil }
