package vgpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/preempt"
	"volcano.sh/volcano/pkg/scheduler/actions/reclaim"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
)

var idleOnly = map[string]string{api.AnnotationCardPolicy: string(api.PolicyIdleOnly)}

// asIdleOnly marks a pod as having asked for idle cards only.
func asIdleOnly(p *corev1.Pod) *corev1.Pod {
	p.Annotations[api.AnnotationCardPolicy] = string(api.PolicyIdleOnly)
	return p
}

// grouped gives running pods the pod groups their annotations name.
func grouped(utc *uthelper.TestCommonStruct, pods ...*corev1.Pod) {
	for _, p := range pods {
		utc.PodGroups = append(utc.PodGroups, podGroup(p.Annotations[schedulingv1.KubeGroupNameAnnotationKey], 1))
		utc.Pods = append(utc.Pods, p)
	}
}

func TestAnIdleOnlyPodTakesOnlyIdleCards(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		used     []string // cards of n1 a shared pod runs on
		wantCard string   // "": pending
		wantWhy  string
	}{
		{"binpack joins the used card", nil, []string{"GPU-n1-0"}, "GPU-n1-0", ""},
		{"idle-only takes the idle card", idleOnly, []string{"GPU-n1-0"}, "GPU-n1-1", ""},
		{"idle-only waits while every card is used, saying why", idleOnly, []string{"GPU-n1-0", "GPU-n1-1"}, "",
			"card 0 is in use by 1 container; the pod asks for idle cards only (tessera.io/card-policy: idle-only) (and 1 more)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)}, Queues: queues(),
				PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1)}, Pods: []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, tc.ann)}}
			for _, card := range tc.used {
				grouped(utc, runningOn("r-"+card, "n1", api.QoSFixedShare, card))
			}
			ssn, _ := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["p"]
			switch {
			case tc.wantCard != "" && (a == nil || a.Containers[0].Cards[0].UUID != tc.wantCard):
				t.Fatalf("placed on %+v, want card %s", a, tc.wantCard)
			case tc.wantCard == "" && a != nil:
				t.Fatalf("placed on %+v, want pending", a)
			case tc.wantCard == "" && !strings.Contains(jobMessage(ssn), tc.wantWhy):
				t.Fatalf("reason %q, want it to contain %q", jobMessage(ssn), tc.wantWhy)
			}
		})
	}
}

// The other way round: no pod joins a card an idle-only pod holds, whether it runs
// there already or was placed earlier in the same session.
func TestNoPodJoinsAnIdleOnlyPodsCard(t *testing.T) {
	// The idle-only pod is another queue's: in q1's own, it would hold the whole
	// cluster and q1 would be at its share (the card charged whole, fairshare.Cards),
	// which is said before the card is.
	utc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{gpuNode("n1", 1, "NVIDIA A100", 40960)},
		Queues:    append(queues(), util.BuildQueue("other", 1, nil)),
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1), util.BuildPodGroup("pg-mutex", "ns", "other", 1, nil, schedulingv1.PodGroupRunning)},
		Pods:      []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, nil)}}
	held := asIdleOnly(runningOn("mutex", "n1", api.QoSFixedShare, "GPU-n1-0"))
	held.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-mutex"
	utc.Pods = append(utc.Pods, held)
	ssn, _ := session(t, utc, true, nil)
	if a := taskAssignments(t, ssn)["p"]; a != nil {
		t.Fatalf("placed beside the idle-only pod: %+v", a)
	}
	if msg := jobMessage(ssn); !strings.Contains(msg, "card 0 is held by an idle-only pod") {
		t.Fatalf("reason %q does not name the held card", msg)
	}

	// Three pods that would share one card by memory and cores, on two cards.
	utc = &uthelper.TestCommonStruct{Nodes: []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)}, Queues: queues(),
		PodGroups: []*schedulingv1.PodGroup{podGroup("pa", 1), podGroup("pb", 1), podGroup("pc", 1)},
		Pods: []*corev1.Pod{vgpuPod("a", "pa", 1, 10000, 30, idleOnly), vgpuPod("b", "pb", 1, 10000, 30, nil),
			vgpuPod("c", "pc", 1, 10000, 30, nil)}}
	ssn, _ = session(t, utc, true, nil)
	got := taskAssignments(t, ssn)
	if len(got) != 3 {
		t.Fatalf("%d of 3 pods placed, want all", len(got))
	}
	mutex := got["a"].Containers[0].Cards[0].UUID
	for _, other := range []string{"b", "c"} {
		if got[other].Containers[0].Cards[0].UUID == mutex {
			t.Fatalf("%s shares card %s with the idle-only pod", other, mutex)
		}
	}
}

// An idle-only pod bound a second ago, whose informer copy does not show its
// assignment yet, holds its card from the in-flight store: the next session places
// nothing beside it.
func TestAnIdleOnlyAssignmentInFlightHoldsItsCard(t *testing.T) {
	testSched = NewScheduler()
	binder := util.NewFakeBinder(10)
	sc := cache.NewCustomMockSchedulerCache("utmock-scheduler", binder, util.NewFakeEvictor(0), &util.FakeStatusUpdater{}, nil, nil)
	sc.AddOrUpdateNode(gpuNode("n1", 1, "NVIDIA A100", 40960))
	sc.AddQueueV1beta1(util.BuildQueue("q1", 1, nil))
	sc.AddPodGroupV1beta1(podGroup("pg1", 1))
	sc.AddPod(vgpuPod("first", "pg1", 1, 1000, 10, idleOnly))
	uthelper.RegisterPlugins(builders(nil))
	t.Cleanup(framework.CleanupPluginBuilders)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	sc.Run(stop)
	run := func() map[string]*api.PodAssignment {
		ssn := framework.OpenSession(sc, tiers(true, nil), nil)
		defer framework.CloseSession(ssn)
		act := allocate.New()
		act.Initialize()
		act.Execute(ssn)
		act.UnInitialize()
		return taskAssignments(t, ssn)
	}
	if run()["first"] == nil {
		t.Fatal("the idle-only pod was not placed")
	}
	select {
	case <-binder.Channel:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle-only pod was never bound")
	}
	sc.AddPodGroupV1beta1(podGroup("pg2", 1))
	sc.AddPod(vgpuPod("second", "pg2", 1, 1000, 10, nil))
	if a := run()["second"]; a != nil {
		t.Fatalf("the next session put a pod beside the idle-only pod in flight: %+v", a)
	}
}

// mutexScene is one node whose cards are held by running pods of one queue (name →
// card, priority class, idle-only) and a pending "high" pod asking 10000 MiB and 10%
// of one card, with annotations ann.
func mutexScene(cards int, holders []holder, ann map[string]string) *uthelper.TestCommonStruct {
	value := map[string]int32{"low": 10, "high": 1000}
	tc := &uthelper.TestCommonStruct{
		Nodes:     []*corev1.Node{gpuNode("n1", cards, "NVIDIA A100", 40960)},
		Queues:    queues(),
		PodGroups: []*schedulingv1.PodGroup{prioGroup("pg-high", "high")},
		PriClass:  []*schedv1.PriorityClass{util.BuildPriorityClass("low", value["low"]), util.BuildPriorityClass("high", value["high"])},
	}
	for _, h := range holders {
		p := holding(h.name, "n1", h.card, h.cores, value[h.class])
		p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-" + h.name
		if h.idleOnly {
			asIdleOnly(p)
		}
		tc.PodGroups = append(tc.PodGroups, prioGroup("pg-"+h.name, h.class))
		tc.Pods = append(tc.Pods, p)
	}
	high := vgpuPod("high", "pg-high", 1, 10000, 10, ann)
	prio := value["high"]
	high.Spec.Priority = &prio
	tc.Pods = append(tc.Pods, high)
	return tc
}

type holder struct {
	name, card, class string
	cores             int64
	idleOnly          bool
}

// Preemption plans by the same book: an idle-only pod's card goes to another pod only
// with the idle-only pod evicted, and an idle-only pod gets a card only once every
// other pod on it is.
func TestPreemptHonoursIdleOnlyBothWays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cards   int
		holders []holder
		ann     map[string]string
		want    []string
	}{
		{"control: a shared pod fits beside a shared low pod, nothing evicted", 1,
			[]holder{{"low", "GPU-n1-0", "low", 10, false}}, nil, nil},
		{"an idle-only pod evicts the low pod on the card it needs idle", 1,
			[]holder{{"low", "GPU-n1-0", "low", 10, false}}, idleOnly, []string{"ns/low"}},
		{"a shared pod evicts the low idle-only pod holding the card", 1,
			[]holder{{"mutex", "GPU-n1-0", "low", 10, true}}, nil, []string{"ns/mutex"}},
		{"control: the same card held shared takes the pod beside, nothing evicted", 2,
			[]holder{{"mutex", "GPU-n1-0", "high", 10, false}, {"low", "GPU-n1-1", "low", 100, false}}, nil, nil},
		{"a card held by an idle-only pod that may not be evicted is not offered: the low pod's card is freed", 2,
			[]holder{{"mutex", "GPU-n1-0", "high", 10, true}, {"low", "GPU-n1-1", "low", 100, false}}, nil, []string{"ns/low"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ssn, got := runEvict(t, mutexScene(tc.cards, tc.holders, tc.ann), allocate.New(), preempt.New())
			if !slices.Equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
			if a := taskAssignments(t, ssn)["high"]; tc.want != nil && a != nil {
				t.Fatalf("high was allocated %+v beside the pods it had to evict", a)
			}
		})
	}
}

// Reclaim likewise: queue b's pods would fit beside queue a's idle-only pod, which
// is above a's share (its job can spare it: a CPU-only member runs on a CPU node, so
// that gang's choice on n1 is the idle-only pod whatever order Volcano offers them
// in); they get its card only by evicting it, never beside it.
func TestReclaimTakesAnIdleOnlyCardOnlyByEvictingItsHolder(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 1, "NVIDIA A100", 40960), cpuNode("c1")},
		Queues: []*schedulingv1.Queue{util.BuildQueue("a", 1, nil), util.BuildQueue("b", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-mutex", "ns", "a", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-b", "ns", "b", 1, nil, schedulingv1.PodGroupInqueue)},
	}
	mutex := asIdleOnly(holding("mutex", "n1", "GPU-n1-0", 60, 1))
	mutex.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-mutex"
	cpu := runningCPU("a-cpu", "c1")
	cpu.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-mutex"
	tc.Pods = []*corev1.Pod{mutex, cpu, vgpuPod("b-0", "pg-b", 1, 5000, 30, nil), vgpuPod("b-1", "pg-b", 1, 5000, 30, nil)}
	ssn, got := runEvict(t, tc, allocate.New(), reclaim.New())
	if !slices.Equal(got, []string{"ns/mutex"}) {
		t.Fatalf("evicted %v, want ns/mutex", got)
	}
	if a := taskAssignments(t, ssn); a["b-0"] != nil || a["b-1"] != nil {
		t.Fatalf("queue b was allocated beside the idle-only pod: %+v", a)
	}
}

// tinyIdleOnly is a running pod of job pg that asked 1 MiB and 1% of one card with
// idle cards only, and holds card on node.
func tinyIdleOnly(name, pg, node, card string) *corev1.Pod {
	p := vgpuPod(name, pg, 1, 1, 1, idleOnly)
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	p.Annotations[api.AnnotationAssignment] = fmt.Sprintf(
		`{"version":"v1","node":%q,"qos":"fixed-share","containers":[{"name":"main","cards":[{"uuid":%q,"memoryMiB":1,"cores":1}]}]}`,
		node, card)
	return p
}

// An idle-only pod holds its cards whole, so its queue is charged them whole: a queue
// at its share cannot grow by asking 1 MiB and 1% of a card with idle cards only.
// greedy and fair (weight 1 each) share four cards; greedy's two running idle-only pods
// hold two and it asks for six more, fair asks for three whole cards. Charged what they
// asked, greedy's pods would count for a few MiB and cores, greedy would deserve all it
// asks and take idle cards whenever the queue order reached it (its share looking
// barely touched). Charged whole cards, each queue deserves two cards: greedy is at its
// share and waits, saying so, and fair gets the two idle cards.
func TestTinyIdleOnlyPodsDoNotGrowAQueuePastItsShare(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 4, "NVIDIA A100", 40960)},
		Queues: []*schedulingv1.Queue{util.BuildQueue("greedy", 1, nil), util.BuildQueue("fair", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-held", "ns", "greedy", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-greedy", "ns", "greedy", 1, nil, schedulingv1.PodGroupInqueue),
			util.BuildPodGroup("pg-fair", "ns", "fair", 1, nil, schedulingv1.PodGroupInqueue)},
		Pods: []*corev1.Pod{tinyIdleOnly("held-0", "pg-held", "n1", "GPU-n1-0"), tinyIdleOnly("held-1", "pg-held", "n1", "GPU-n1-1")},
	}
	for i := 0; i < 6; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("greedy-%d", i), "pg-greedy", 1, 1, 1, idleOnly))
	}
	for i := 0; i < 3; i++ {
		tc.Pods = append(tc.Pods, vgpuPod(fmt.Sprintf("fair-%d", i), "pg-fair", 1, 40960, 100, nil))
	}
	ssn, p := session(t, tc, true, nil)
	got := placedPerQueue(t, ssn)
	if got["held"] != 2 || got["greedy"] != 0 || got["fair"] != 2 {
		t.Fatalf("pods holding cards by name %v, want greedy's 2 running (held), fair's 2 and none of greedy's new ones", got)
	}
	var greedy *struct{ held, deserved float64 }
	for _, q := range p.shares.Standings() {
		if q.Name == "greedy" {
			greedy = &struct{ held, deserved float64 }{q.Allocated.Cores, q.Deserved.Cores}
			if q.Allocated.MemoryMiB != 2*40960 {
				t.Errorf("greedy is charged %v MiB, want its two cards whole (%d)", q.Allocated.MemoryMiB, 2*40960)
			}
		}
	}
	if greedy == nil || greedy.held != 200 || greedy.deserved != 200 {
		t.Errorf("greedy holds and deserves %+v cores, want 200 and 200 (two whole cards)", greedy)
	}
	var reason string
	for _, job := range ssn.Jobs {
		for _, fe := range job.NodesFitErrors {
			reason += fe.Error()
		}
	}
	if !strings.Contains(reason, "queue greedy is at its share") {
		t.Errorf("greedy's waiting pods say %q, want the queue share's reason", reason)
	}
}

// Reclaim counts an idle-only pod's card whole. greedy's job (minimum 1) has two
// running idle-only pods that asked 1 MiB and 1% each and hold both cards of n1; fair
// has one pod pending for a share of a card. Charged what it asked, greedy would hold
// 2 cores and deserve them: not above its share, nothing reclaimed, fair waiting for
// ever. Charged whole cards, greedy holds 200 cores where it deserves 170 (fair asks
// 30), so one of its pods is reclaimed for fair.
func TestReclaimCountsAnIdleOnlyPodsWholeCard(t *testing.T) {
	tc := &uthelper.TestCommonStruct{
		Nodes:  []*corev1.Node{gpuNode("n1", 2, "NVIDIA A100", 40960)},
		Queues: []*schedulingv1.Queue{util.BuildQueue("greedy", 1, nil), util.BuildQueue("fair", 1, nil)},
		PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-greedy", "ns", "greedy", 1, nil, schedulingv1.PodGroupRunning),
			util.BuildPodGroup("pg-fair", "ns", "fair", 1, nil, schedulingv1.PodGroupInqueue)},
		Pods: []*corev1.Pod{tinyIdleOnly("greedy-0", "pg-greedy", "n1", "GPU-n1-0"), tinyIdleOnly("greedy-1", "pg-greedy", "n1", "GPU-n1-1"),
			vgpuPod("fair-0", "pg-fair", 1, 10000, 30, nil)},
	}
	ssn, got := runEvict(t, tc, allocate.New(), reclaim.New())
	if len(got) != 1 || !strings.HasPrefix(got[0], "ns/greedy-") {
		t.Fatalf("evicted %v, want one of greedy's idle-only pods", got)
	}
	if a := taskAssignments(t, ssn)["fair-0"]; a != nil {
		t.Fatalf("fair-0 was allocated %+v beside the idle-only pods", a)
	}
}

// Of two victims either of which frees room for the preemptor, the one that takes less
// away goes: an idle-only pod that asked 20000 MiB and 10% holds its card whole (40960
// MiB, 100 cores), so the shared pod of 20000 MiB and 95% is the smaller. Charged what
// it asked, the idle-only pod would be taken for the smaller and evicted.
func TestPreemptCountsAnIdleOnlyVictimsWholeCard(t *testing.T) {
	holders := []holder{{"mutex", "GPU-n1-0", "low", 10, true}, {"low", "GPU-n1-1", "low", 95, false}}
	ssn, got := runEvict(t, mutexScene(2, holders, nil), allocate.New(), preempt.New())
	if !slices.Equal(got, []string{"ns/low"}) {
		t.Fatalf("evicted %v, want ns/low (the idle-only pod holds a whole card)", got)
	}
	if a := taskAssignments(t, ssn)["high"]; a != nil {
		t.Fatalf("high was allocated %+v beside the pods it had to evict", a)
	}
}
