package vgpu

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/enqueue"
	"volcano.sh/volcano/pkg/scheduler/actions/preempt"
	"volcano.sh/volcano/pkg/scheduler/actions/reclaim"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/conformance"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/plugins/priority"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

// evictTiers puts vgpu in the first tier, beside priority, gang and conformance: Volcano
// takes its victims from the first tier whose plugins offer any.
func evictTiers() []conf.Tier {
	opt := func(n string) conf.PluginOption {
		o := conf.PluginOption{Name: n}
		plugins.ApplyPluginConfDefaults(&o)
		return o
	}
	// As config/volcano-scheduler.conf: gang's minAvailable does not shield pods from
	// preemption inside a queue.
	g := opt(gang.PluginName)
	off := false
	g.EnabledPreemptable = &off
	return []conf.Tier{
		{Plugins: []conf.PluginOption{opt(priority.PluginName), g, opt(conformance.PluginName), opt(PluginName)}},
		{Plugins: []conf.PluginOption{opt(predicates.PluginName), opt(proportion.PluginName), opt(nodeorder.PluginName)}},
	}
}

// enableActions records the session's actions where Volcano's actions look them up
// (allocate and reclaim skip Pending jobs only when enqueue is enabled), as the
// scheduler does from its conf.
func enableActions(actions []framework.Action) {
	conf.EnabledActionMap = map[string]bool{}
	for _, a := range actions {
		conf.EnabledActionMap[a.Name()] = true
	}
}

// lastTierVGPU is the layout of confs written before the plugin took part in choosing
// victims: vgpu in the last tier, where Volcano never asks it for victims.
func lastTierVGPU() []conf.Tier {
	t := evictTiers()
	t[0].Plugins = t[0].Plugins[:3]
	o := conf.PluginOption{Name: PluginName}
	plugins.ApplyPluginConfDefaults(&o)
	t[1].Plugins = append(t[1].Plugins, o)
	return t
}

func evictBuilders(captured **vgpuPlugin) map[string]framework.PluginBuilder {
	b := builders(captured)
	b[priority.PluginName] = priority.New
	b[conformance.PluginName] = conformance.New
	return b
}

// holding is a running pod of queue's job pg holding one card exclusively (or at cores%).
func holding(name, node, card string, cores int64, prio int32) *corev1.Pod {
	p := vgpuPod(name, "pg-"+name, 1, 20000, cores, nil)
	p.Spec.NodeName = node
	p.Spec.Priority = &prio
	p.Status.Phase = corev1.PodRunning
	p.Annotations[api.AnnotationAssignment] = fmt.Sprintf(
		`{"version":"v1","node":%q,"qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":%q,"memoryMiB":20000,"cores":%d}]}]}`,
		node, card, cores)
	return p
}

func prioGroup(name, class string) *schedulingv1.PodGroup {
	pg := podGroup(name, 1)
	pg.Spec.PriorityClassName = class
	return pg
}

func runningCPU(name, node string) *corev1.Pod {
	p := cpuPod(name, "pg-"+name)
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	return p
}

// runEvict schedules tc's objects through actions with a buffered evictor (Volcano's
// test harness evictor blocks until read) and returns the session and what was evicted.
func runEvict(t *testing.T, tc *uthelper.TestCommonStruct, actions ...framework.Action) (*framework.Session, []string) {
	return runEvictWith(t, tc, evictTiers(), actions...)
}

func runEvictWith(t *testing.T, tc *uthelper.TestCommonStruct, tiers []conf.Tier, actions ...framework.Action) (*framework.Session, []string) {
	t.Helper()
	testSched = NewScheduler()
	ev := util.NewFakeEvictor(100)
	sc := cache.NewCustomMockSchedulerCache("volcano", util.NewFakeBinder(100), ev, &util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	for _, n := range tc.Nodes {
		sc.AddOrUpdateNode(n)
	}
	for _, q := range tc.Queues {
		sc.AddQueueV1beta1(q)
	}
	for _, pc := range tc.PriClass {
		sc.AddPriorityClass(pc)
	}
	for _, pg := range tc.PodGroups {
		sc.AddPodGroupV1beta1(pg)
	}
	for _, p := range tc.Pods {
		sc.AddPod(p)
	}
	uthelper.RegisterPlugins(evictBuilders(nil))
	t.Cleanup(framework.CleanupPluginBuilders)
	ssn := framework.OpenSession(sc, tiers, nil)
	t.Cleanup(func() { framework.CloseSession(ssn) })
	t.Cleanup(testSched.Close)
	enableActions(actions)
	for _, a := range actions {
		a.Initialize()
		a.Execute(ssn)
		a.UnInitialize()
	}
	// Evictions are sent asynchronously: wait until none arrives for a while.
	n := -1
	for n != ev.Length() {
		n = ev.Length()
		time.Sleep(100 * time.Millisecond)
	}
	got := ev.Evicts()
	sort.Strings(got)
	return ssn, got
}

// Queue a holds every card with an elastic job (four pods, minimum one) and runs an
// elastic CPU-only job beside it; queue b, of the same weight, submits two one-card
// tasks. Reclaim takes back exactly two of a's cards, evicting two of a's vGPU pods and
// none of its CPU-only pods, and pipelines b's tasks there.
func TestReclaimTakesCardsBackFromTheQueueAboveItsShare(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960), gpuNode("n2", 2, "NVIDIA A100", 40960)},
		Queues: []*schedulingv1.Queue{util.BuildQueue("a", 1, nil), util.BuildQueue("b", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "a", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-a-cpu", "ns", "a", 1, nil, schedulingv1.PodGroupRunning)},
	}
	for i, at := range []struct{ node, card string }{{"n1", "GPU-n1-0"}, {"n1", "GPU-n1-1"}, {"n2", "GPU-n2-0"}, {"n2", "GPU-n2-1"}} {
		p := holding(fmt.Sprintf("a-%d", i), at.node, at.card, 100, 1)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
		tc.Pods = append(tc.Pods, p)
	}
	for _, n := range []string{"n1", "n2"} {
		p := runningCPU("a-cpu-"+n, n)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a-cpu"
		tc.Pods = append(tc.Pods, p)
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("b-%d", i)
		// Submitted as Volcano's job controller does: Pending, with minResources, so
		// that enqueue must admit a job that only reclaim can make room for.
		pg := util.BuildPodGroup("pg-"+name, "ns", "b", 1, nil, schedulingv1.PodGroupPending)
		pg.Spec.MinResources = &corev1.ResourceList{}
		tc.PodGroups = append(tc.PodGroups, pg)
		tc.Pods = append(tc.Pods, vgpuPod(name, "pg-"+name, 1, 20000, 100, nil))
	}
	ssn, got := runEvict(t, tc, enqueue.New(), allocate.New(), reclaim.New())
	if len(got) != 2 {
		t.Fatalf("evicted %v, want two of queue a's vGPU pods", got)
	}
	for _, e := range got {
		if e == "ns/a-cpu-n1" || e == "ns/a-cpu-n2" {
			t.Fatalf("evicted the CPU-only pod %s for a card shortage (all: %v)", e, got)
		}
	}
	pipelined := 0
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Status.String() == "Pipelined" {
				pipelined++
			}
		}
	}
	if pipelined != 2 {
		t.Errorf("%d of queue b's tasks pipelined, want 2", pipelined)
	}
}

// preemptScene is one node with one card held by a vGPU pod of the holder's priority
// class, a CPU-only pod of class "low", and a pending "high" vGPU task with the given
// annotations: all in one queue.
func preemptScene(holderClass string, highAnn map[string]string) *uthelper.TestCommonStruct {
	value := map[string]int32{"low": 10, "high": 1000}
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 1, "NVIDIA A100", 40960)},
		Queues:    queues(),
		PodGroups: []*schedulingv1.PodGroup{prioGroup("pg-holder", holderClass), prioGroup("pg-cpu", "low"), prioGroup("pg-high", "high")},
		PriClass:  []*schedv1.PriorityClass{util.BuildPriorityClass("low", value["low"]), util.BuildPriorityClass("high", value["high"])},
	}
	holder := holding("holder", "n1", "GPU-n1-0", 100, value[holderClass])
	holder.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-holder"
	cpu := runningCPU("cpu", "n1")
	cpu.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-cpu"
	high := vgpuPod("high", "pg-high", 1, 20000, 100, highAnn)
	prio := value["high"]
	high.Spec.Priority = &prio
	tc.Pods = []*corev1.Pod{holder, cpu, high}
	return tc
}

// A task whose type filter matches no card on the node is never worth an eviction:
// nothing is evicted, however low the victims' priority.
// TestReclaimPrefersTheNodeWhereOneVictimFreesACard: five nodes have their one card
// shared by two half-card pods of queue a, one node has its card held whole by one
// pod of queue a. Volcano would evict just one of two half-card pods (CPU and slots
// fit after one) and the pipeline would be refused and rolled back, so the plugin
// offers no set of several victims there: a whole-card task of queue b reclaims the
// whole-card pod, on the first try.
func TestReclaimPrefersTheNodeWhereOneVictimFreesACard(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Queues:    []*schedulingv1.Queue{util.BuildQueue("a", 1, nil), util.BuildQueue("b", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "a", 1, nil, schedulingv1.PodGroupRunning)},
	}
	hold := func(name, node string, cores int64) {
		p := holding(name, node, "GPU-"+node+"-0", cores, 1)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
		tc.Pods = append(tc.Pods, p)
	}
	for i := 0; i < 5; i++ {
		node := fmt.Sprintf("half%d", i)
		tc.Nodes = append(tc.Nodes, gpuNode(node, 1, "NVIDIA A100", 40960))
		hold(node+"-x", node, 50)
		hold(node+"-y", node, 50)
	}
	tc.Nodes = append(tc.Nodes, gpuNode("whole", 1, "NVIDIA A100", 40960))
	hold("whole-x", "whole", 100)
	pg := util.BuildPodGroup("pg-b", "ns", "b", 1, nil, schedulingv1.PodGroupInqueue)
	tc.PodGroups = append(tc.PodGroups, pg)
	tc.Pods = append(tc.Pods, vgpuPod("b-0", "pg-b", 1, 20000, 100, nil))

	ssn, got := runEvict(t, tc, reclaim.New())
	if len(got) != 1 || got[0] != "ns/whole-x" {
		t.Fatalf("evicted %v, want only ns/whole-x (one victim frees a whole card)", got)
	}
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name == "b-0" && (task.Status.String() != "Pipelined" || task.NodeName != "whole") {
				t.Errorf("b-0 is %s on %q, want pipelined on node whole", task.Status, task.NodeName)
			}
		}
	}
}

func TestPreemptEvictsNothingForACardItCannotUse(t *testing.T) {
	tc := preemptScene("low", map[string]string{api.AnnotationGPUTypeInclude: "H100"})
	if _, got := runEvict(t, tc, allocate.New(), preempt.New()); len(got) != 0 {
		t.Fatalf("evicted %v for a task that can use no card here", got)
	}
}

// Inside a queue, a high-priority vGPU task preempts the low-priority vGPU pod whose
// card it can use, not the CPU-only pod beside it.
func TestPreemptEvictsTheVGPUPodThatFreesTheCard(t *testing.T) {
	if _, got := runEvict(t, preemptScene("low", nil), allocate.New(), preempt.New()); len(got) != 1 || got[0] != "ns/holder" {
		t.Fatalf("evicted %v, want exactly ns/holder", got)
	}
}

// With the plugin in a later tier, where Volcano does not ask it for victims, a card
// held by a pod of equal priority is not freed by evicting the lower-priority CPU-only
// pod beside it.
func TestPreemptLeavesANodeWhoseCardsItMayNotTake(t *testing.T) {
	if _, got := runEvictWith(t, preemptScene("high", nil), lastTierVGPU(), allocate.New(), preempt.New()); len(got) != 0 {
		t.Fatalf("evicted %v; the card is held by a pod of equal priority", got)
	}
}

// With the shipped conf's actions in order, preempt must not pipeline a vGPU task onto
// cards that stay full (Volcano pipelines when CPU, memory and slots fit): that made
// the late queue look overused to proportion, and reclaim skipped it for ever.
func TestShippedActionsReclaimForALateQueue(t *testing.T) {
	actions, tiers, _, _, err := scheduler.UnmarshalSchedulerConf(exampleConf(t, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960), gpuNode("n2", 4, "NVIDIA A100", 40960)},
		Queues:    []*schedulingv1.Queue{util.BuildQueue("early", 1, nil), util.BuildQueue("late", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "early", 1, nil, schedulingv1.PodGroupRunning)},
	}
	for i := 0; i < 8; i++ {
		p := holding(fmt.Sprintf("a-%d", i), fmt.Sprintf("n%d", 1+i/4), fmt.Sprintf("GPU-n%d-%d", 1+i/4, i%4), 100, 1)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
		tc.Pods = append(tc.Pods, p)
	}
	pg := util.BuildPodGroup("pg-late", "ns", "late", 1, nil, schedulingv1.PodGroupPending)
	pg.Spec.MinResources = &corev1.ResourceList{}
	tc.PodGroups = append(tc.PodGroups, pg)
	for i := 0; i < 4; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("late-%d", i), "pg-late", 1, 20000, 100, nil))
	}
	ssn, got := runEvictWith(t, tc, tiers, actions...)
	// Volcano reclaims for an elastic job until it is no longer starving: one task.
	if len(got) != 1 {
		t.Fatalf("evicted %v, want one of queue early's pods", got)
	}
	for _, job := range ssn.Jobs {
		if job.Name == "pg-late" && len(job.TaskStatusIndex[vapi.Pipelined]) != 1 {
			t.Fatalf("%d of late's tasks pipelined, want the one its eviction made room for", len(job.TaskStatusIndex[vapi.Pipelined]))
		}
	}
}

// A task pipelined onto cards that will not take it is refused, and the refusal is
// counted for operators (tessera_scheduler_vgpu_pipelines_refused_total).
func TestRefusedPipelineIsCounted(t *testing.T) {
	tc := preemptScene("high", nil) // n1's one card held whole
	testSched = NewScheduler()
	ssn, p := open(t, tc, evictTiers())
	var task *vapi.TaskInfo
	for _, job := range ssn.Jobs {
		for _, tk := range job.TaskStatusIndex[vapi.Pending] {
			task = tk.Clone()
		}
	}
	if task == nil {
		t.Fatal("no pending task")
	}
	task.NodeName = "n1"
	e := &framework.Event{Task: task}
	p.onPipeline(e)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "will not fit the cards of node n1") {
		t.Fatalf("pipeline onto a full card: err %v", e.Err)
	}
	if n := testutil.ToFloat64(p.metrics.pipelinesRefused); n != 1 {
		t.Errorf("refused pipelines counted %v, want 1", n)
	}
}

// A gang of three whole-card members, and two free cards, one on each node. Beside
// n1's sits a card held whole, beside n2's a card held by half (pods of a higher
// priority: nothing may be evicted), so binpack prefers n1. Allocate places two
// members and rolls the gang back; preempt then pipelines members where their cards
// fit, evicting nothing. The second member must not be sent to n1 again, whose free
// card the first was just pipelined onto: Volcano checks only CPU, memory and slots
// there, and the plugin would refuse the pipeline.
func TestPreemptSendsNoMemberToACardASessionPipelineTook(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960), gpuNode("n2", 2, "NVIDIA A100", 40960)},
		Queues:    queues(),
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg-g", 3), podGroup("pg-held", 1)},
	}
	for _, h := range []struct {
		node  string
		cores int64
	}{{"n1", 100}, {"n2", 50}} {
		p := holding("held-"+h.node, h.node, "GPU-"+h.node+"-0", h.cores, 1000)
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-held"
		tc.Pods = append(tc.Pods, p)
	}
	for i := 0; i < 3; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("g-%d", i), "pg-g", 1, 20000, 100, nil))
	}
	if _, got := runEvict(t, tc, allocate.New(), preempt.New()); len(got) != 0 {
		t.Fatalf("evicted %v; nothing may be", got)
	}
	if n := testutil.ToFloat64(testSched.metrics.pipelinesRefused); n != 0 {
		t.Errorf("%v pipelines refused on the cards: a member was sent to a card a pipelined member takes", n)
	}
}

// Inside a queue below its card share, with CPU to spare on the node, a high-priority
// vGPU task still preempts the low-priority pod whose card it needs. Volcano's preempt
// stops evicting as soon as the queue may allocate the task and its CPU, memory and
// slots fit the node; the plugin's Allocatable holds until the node's cards take the
// task. Here the cluster's other card is an A30 the task may not use, so the queue is
// below its share; with vgpu.QueueShare off there is no share at all.
func TestPreemptEvictsForCardsWhileCPUFits(t *testing.T) {
	for _, tt := range []struct {
		name  string
		share bool
	}{{"queue below its share", true}, {"no queue shares", false}} {
		t.Run(tt.name, func(t *testing.T) {
			tc := preemptScene("low", map[string]string{api.AnnotationGPUTypeInclude: "A100"})
			tc.Nodes = append(tc.Nodes, gpuNode("n2", 1, "NVIDIA A30", 24576))
			tiers := evictTiers()
			tiers[0].Plugins[3].Arguments = framework.Arguments{"vgpu.QueueShare": tt.share}
			ssn, got := runEvictWith(t, tc, tiers, allocate.New(), preempt.New())
			if len(got) != 1 || got[0] != "ns/holder" {
				t.Fatalf("evicted %v, want exactly ns/holder", got)
			}
			for _, job := range ssn.Jobs {
				for _, tk := range job.Tasks {
					if tk.Name == "high" && (tk.Status != vapi.Pipelined || tk.NodeName != "n1") {
						t.Errorf("high is %s on %q, want pipelined on n1", tk.Status, tk.NodeName)
					}
				}
			}
			if n := testutil.ToFloat64(testSched.metrics.pipelinesRefused); n != 0 {
				t.Errorf("%v pipelines refused on the cards", n)
			}
		})
	}
}
