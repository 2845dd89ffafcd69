package vgpu

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// gateScene is one node of four 40960 MiB cards shared by queues qa and qb (weight 1
// each). holders names, per queue, how many of its running pods hold a whole card;
// the pods given are pending and created in the API server's fake as well (their
// PodGroups, queue in their name's first two letters, are made for them).
type gateScene struct {
	sc       *cache.SchedulerCache
	events   *record.FakeRecorder
	client   kubernetes.Interface
	holders  map[string][]*corev1.Pod
	pending  []*corev1.Pod
	sessions []*framework.Session
}

func newGateScene(t *testing.T, holders map[string]int, groups map[string]int32, pending ...*corev1.Pod) *gateScene {
	t.Helper()
	testSched = NewScheduler()
	t.Cleanup(testSched.Close)
	s := &gateScene{events: record.NewFakeRecorder(100), holders: map[string][]*corev1.Pod{}, pending: pending}
	s.sc = cache.NewCustomMockSchedulerCache("utmock-scheduler", util.NewFakeBinder(10), util.NewFakeEvictor(10),
		&util.FakeStatusUpdater{}, nil, s.events)
	s.client = s.sc.Client()
	s.sc.AddOrUpdateNode(gpuNode("n1", 4, "NVIDIA A100", 40960))
	s.sc.AddQueueV1beta1(util.BuildQueue("qa", 1, nil))
	s.sc.AddQueueV1beta1(util.BuildQueue("qb", 1, nil))
	card := 0
	for _, q := range []string{"qa", "qb"} {
		for i := 0; i < holders[q]; i++ {
			name := fmt.Sprintf("%s-hold-%d", q, i)
			p := holding(name, "n1", fmt.Sprintf("GPU-n1-%d", card), 100, 1)
			card++
			s.sc.AddPodGroupV1beta1(util.BuildPodGroup("pg-"+name, "ns", q, 1, nil, schedulingv1.PodGroupRunning))
			s.sc.AddPod(p)
			s.holders[q] = append(s.holders[q], p)
		}
	}
	for pg, min := range groups {
		s.sc.AddPodGroupV1beta1(util.BuildPodGroup(pg, "ns", pg[:2], min, nil, schedulingv1.PodGroupInqueue))
	}
	for _, p := range pending {
		s.sc.AddPod(p)
		if _, err := s.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	uthelper.RegisterPlugins(builders(nil))
	t.Cleanup(framework.CleanupPluginBuilders)
	t.Cleanup(func() {
		for _, ssn := range s.sessions {
			framework.CloseSession(ssn)
		}
	})
	return s
}

// reserveForQB adds room to the cluster that qb claims: a second node of cards whole
// A100s, and as many pending one-card qb pods, held back by another controller's gate.
// The cluster then has free cards that qa may not take (nor borrow: qb's pods fit
// them), so a qa pod its share refuses waits for its queue, not for cards. Without
// such room a refused pod is ungated (the cluster is full: a new node would raise
// qa's share too).
func (s *gateScene) reserveForQB(t *testing.T, cards int) []*corev1.Pod {
	t.Helper()
	s.sc.AddOrUpdateNode(gpuNode("n2", cards, "NVIDIA A100", 40960))
	var pods []*corev1.Pod
	for i := 0; i < cards; i++ {
		pg := fmt.Sprintf("qb-reserve-%d", i)
		s.sc.AddPodGroupV1beta1(util.BuildPodGroup(pg, "ns", "qb", 1, nil, schedulingv1.PodGroupInqueue))
		p := withGates(vgpuPod(pg, pg, 1, 40960, 100, nil), "example.com/later")
		s.sc.AddPod(p)
		pods = append(pods, p)
	}
	return pods
}

// session opens a session (which starts the gate removals it decides) and returns the
// plugin and the plan it made, recomputed on the same session.
func (s *gateScene) session(t *testing.T) (*vgpuPlugin, gatePlan) {
	t.Helper()
	var p *vgpuPlugin
	uthelper.RegisterPlugins(builders(&p))
	ssn := framework.OpenSession(s.sc, tiers(true, nil), nil)
	s.sessions = append(s.sessions, ssn)
	if p == nil {
		t.Fatal("the session built no vgpu plugin")
	}
	var before []shares.Standing
	if p.shares != nil {
		before = p.shares.Standings()
	}
	plan := p.planGates(p.gatedJobs(ssn))
	if p.shares != nil && !reflect.DeepEqual(before, p.shares.Standings()) {
		t.Errorf("planning the gates changed the session's shares:\n%+v\n%+v", before, p.shares.Standings())
	}
	return p, plan
}

// gates is the pod's gates in the API server's fake, once the patches settle.
func (s *gateScene) gates(t *testing.T, name string, want []string) []string {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pod, err := s.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, g := range pod.Spec.SchedulingGates {
			got = append(got, g.Name)
		}
		if slices.Equal(got, want) || time.Now().After(deadline) {
			return got
		}
	}
}

func withGates(p *corev1.Pod, gates ...string) *corev1.Pod {
	for _, g := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return p
}

func opened(plan gatePlan) []string {
	var out []string
	for _, p := range plan.open {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func events(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Queue qa holds its half of the cards; its gated pod stays gated, and the PodGroup
// says which queue and which resource. When one of qb's pods ends, the next session
// takes the gate off in the API server.
func TestQueueGateOpensWhenTheShareFrees(t *testing.T) {
	s := newGateScene(t, map[string]int{"qa": 3, "qb": 1}, map[string]int32{"qa-job": 1},
		withGates(vgpuPod("qa-w", "qa-job", 1, 4096, 25, nil), queueShareGate))
	reserve := s.reserveForQB(t, 2)
	_, plan := s.session(t)
	if len(plan.open) != 0 {
		t.Fatalf("session 1 ungated %v while qa holds its whole share", opened(plan))
	}
	want := "vgpu: queue qa is at its share of the cluster's cards (weight 1 of 2): cores 300 held + 25 asked > 300 deserved"
	if len(plan.held) != 1 || !strings.HasPrefix(plan.held[0].why, want) {
		t.Fatalf("held %+v, want qa-job held with %q", plan.held, want)
	}
	if got := events(s.events); len(got) != 1 || !strings.Contains(got[0], "QueueShareGated "+want) {
		t.Errorf("events %q, want one QueueShareGated event saying %q", got, want)
	}
	if got := s.gates(t, "qa-w", []string{queueShareGate}); !slices.Equal(got, []string{queueShareGate}) {
		t.Fatalf("after session 1 the pod's gates are %v, want the queue gate kept", got)
	}

	for _, p := range reserve {
		s.sc.DeletePod(p)
	}
	_, plan = s.session(t)
	if got := opened(plan); !slices.Equal(got, []string{"qa-w"}) {
		t.Fatalf("session 2 ungates %v, want qa-w: qb's share shrank to what it holds", got)
	}
	if got := s.gates(t, "qa-w", nil); len(got) != 0 {
		t.Errorf("after session 2 the pod's gates are %v, want none", got)
	}
}

// A gang's minimum goes all together or not at all. qa holds 200 cores and deserves
// 300 (qb holds 100 and asks no more): two members of 50 fit its share, a third does
// not. A plan that asked per pod would ungate two of three; one that asked for the
// gang's sum at once would ungate all three (qa is below its share, and a queue below
// its share may place one more task).
func TestQueueGateOpensAGangAllTogether(t *testing.T) {
	for _, members := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			var pods []*corev1.Pod
			var names []string
			for i := 0; i < members; i++ {
				name := fmt.Sprintf("qa-g-%d", i)
				pods = append(pods, withGates(vgpuPod(name, "qa-gang", 1, 4096, 50, nil), queueShareGate))
				names = append(names, name)
			}
			s := newGateScene(t, map[string]int{"qa": 2, "qb": 1}, map[string]int32{"qa-gang": int32(members)}, pods...)
			s.reserveForQB(t, 2)
			_, plan := s.session(t)
			got := opened(plan)
			switch {
			case members == 2 && !slices.Equal(got, names):
				t.Errorf("ungated %v, want the whole gang %v: 300 cores of 300 deserved", got, names)
			case members == 3 && len(got) != 0:
				t.Errorf("ungated %v, want none: the gang's 150 cores take qa to 350 of 300 deserved", got)
			}
			if members == 3 {
				if len(plan.held) != 1 || !strings.Contains(plan.held[0].why, "queue qa") || !strings.Contains(plan.held[0].why, "3 gated pods wait behind") {
					t.Errorf("held %+v, want the gang held naming queue qa", plan.held)
				}
				if got := s.gates(t, names[0], []string{queueShareGate}); len(got) != 1 {
					t.Errorf("a held member's gates are %v", got)
				}
			} else {
				for _, n := range names {
					if got := s.gates(t, n, nil); len(got) != 0 {
						t.Errorf("member %s still gated: %v", n, got)
					}
				}
			}
		})
	}
}

// A pod that also carries another controller's gate is that controller's: it is never
// patched, though its queue has room. A CPU pod never is either, even one somebody
// created with Tessera's gate. The plain vGPU pod beside them is the control.
func TestQueueGateLeavesOtherGatesAndCPUPodsAlone(t *testing.T) {
	s := newGateScene(t, nil, map[string]int32{"qa-mixed": 1, "qa-cpu": 1, "qa-plain": 1},
		withGates(vgpuPod("qa-mixed", "qa-mixed", 1, 4096, 25, nil), queueShareGate, "example.com/quota"),
		withGates(cpuPod("qa-cpu", "qa-cpu"), queueShareGate),
		withGates(vgpuPod("qa-plain", "qa-plain", 1, 4096, 25, nil), queueShareGate))
	_, plan := s.session(t)
	if got := opened(plan); !slices.Equal(got, []string{"qa-plain"}) {
		t.Fatalf("ungated %v, want only qa-plain", got)
	}
	if got := s.gates(t, "qa-plain", nil); len(got) != 0 {
		t.Fatalf("the control is still gated: %v", got)
	}
	// The control's patch has returned; the others were never in the plan.
	if got := s.gates(t, "qa-mixed", []string{queueShareGate, "example.com/quota"}); !slices.Equal(got, []string{queueShareGate, "example.com/quota"}) {
		t.Errorf("the pod with another controller's gate now has %v", got)
	}
	if got := s.gates(t, "qa-cpu", []string{queueShareGate}); !slices.Equal(got, []string{queueShareGate}) {
		t.Errorf("the CPU pod now has gates %v", got)
	}
	for _, a := range s.client.(interface{ Actions() []k8stesting.Action }).Actions() {
		if a.GetVerb() == "patch" && a.(k8stesting.PatchAction).GetName() != "qa-plain" {
			t.Errorf("patched %s", a.(k8stesting.PatchAction).GetName())
		}
	}
}

// A pod ungated in an earlier session and not yet placed still counts against its
// queue: qa's share has room for one 100-core pod, and the ungated one takes it (qb
// claims the cluster's other free cards).
func TestQueueGateChargesPodsAlreadyUngated(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("ungated pod ahead: %v", ahead), func(t *testing.T) {
			pods := []*corev1.Pod{withGates(vgpuPod("qa-gated", "qa-gated", 1, 4096, 100, nil), queueShareGate)}
			groups := map[string]int32{"qa-gated": 1}
			if ahead {
				pods = append(pods, vgpuPod("qa-ahead", "qa-ahead", 1, 4096, 100, nil))
				groups["qa-ahead"] = 1
			}
			s := newGateScene(t, map[string]int{"qa": 2, "qb": 2}, groups, pods...)
			s.reserveForQB(t, 2)
			_, plan := s.session(t)
			if got := opened(plan); ahead == (len(got) != 0) {
				t.Errorf("ungated %v with an ungated 100-core pod ahead %v; qa deserves 300 and holds 200", got, ahead)
			}
		})
	}
}

// Without the queue share nothing holds a pod back: every gate comes off.
func TestQueueGateWithoutQueueShareOpensEverything(t *testing.T) {
	s := newGateScene(t, map[string]int{"qa": 2, "qb": 2}, map[string]int32{"qa-job": 1},
		withGates(vgpuPod("qa-w", "qa-job", 1, 4096, 25, nil), queueShareGate))
	var p *vgpuPlugin
	uthelper.RegisterPlugins(builders(&p))
	ssn := framework.OpenSession(s.sc, tiers(true, framework.Arguments{pluginargs.KeyQueueShare: false}), nil)
	s.sessions = append(s.sessions, ssn)
	if got := opened(p.planGates(p.gatedJobs(ssn))); !slices.Equal(got, []string{"qa-w"}) {
		t.Errorf("ungated %v, want qa-w", got)
	}
	if got := s.gates(t, "qa-w", nil); len(got) != 0 {
		t.Errorf("gates %v, want none", got)
	}
}

// The race the gate cannot close (docs/queues.md): the gate comes off when the queue
// admits the pod at one session's open, and the pod is placed at the earliest in the
// next session. If another queue's demand arrives in between, the shares are divided
// again, the pod's queue may no longer admit it, and the pod waits ungated: Volcano then
// reports it Unschedulable, as it would without the gate.
func TestQueueGateRaceAnotherQueueArrivesBeforePlacement(t *testing.T) {
	gatedPod := withGates(vgpuPod("qa-w", "qa-job", 1, 4096, 25, nil), queueShareGate)
	s := newGateScene(t, map[string]int{"qa": 2, "qb": 1}, map[string]int32{"qa-job": 1}, gatedPod)
	if _, plan := s.session(t); !slices.Equal(opened(plan), []string{"qa-w"}) {
		t.Fatalf("session 1 ungated %v, want qa-w: qa deserves 300 of 400 cores and holds 200", opened(plan))
	}
	if got := s.gates(t, "qa-w", nil); len(got) != 0 {
		t.Fatalf("gates %v after session 1", got)
	}
	// The informer shows the ungated pod; qb's new job arrives before the next session.
	ungated := gatedPod.DeepCopy()
	ungated.Spec.SchedulingGates = nil
	s.sc.UpdatePod(gatedPod, ungated)
	s.sc.AddPodGroupV1beta1(util.BuildPodGroup("qb-new", "ns", "qb", 1, nil, schedulingv1.PodGroupInqueue))
	for i := 0; i < 2; i++ {
		s.sc.AddPod(vgpuPod(fmt.Sprintf("qb-new-%d", i), "qb-new", 1, 4096, 100, nil))
	}
	p, _ := s.session(t)
	act := allocate.New()
	act.Initialize()
	act.Execute(p.ssn)
	act.UnInitialize()
	for _, job := range p.ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name != "qa-w" {
				continue
			}
			if task.NodeName != "" {
				t.Fatalf("qa-w placed on %s; the race did not happen", task.NodeName)
			}
			fe := job.NodesFitErrors[task.UID]
			if fe == nil || !strings.Contains(fe.Error(), "queue qa is at its share") {
				t.Fatalf("qa-w waits with fit error %v, want qa's share", fe)
			}
			return
		}
	}
	t.Fatal("qa-w is not in the session")
}

// A queue that holds its share of a full cluster waits for cards as much as for its
// queue: with one queue its share is the whole cluster, and a new node raises it. Its
// pod is ungated so that an autoscaler sees it; with room in the cluster that another
// queue claims, the same pod keeps its gate.
func TestQueueGateOpensWhenTheClusterIsFull(t *testing.T) {
	s := newGateScene(t, map[string]int{"qa": 4}, map[string]int32{"qa-job": 1},
		withGates(vgpuPod("qa-w", "qa-job", 1, 4096, 25, nil), queueShareGate))
	p, plan := s.session(t)
	if ok, why := p.shares.Admit("qa", fairshare.Amount{Cores: 25, MemoryMiB: 4096}); ok {
		t.Fatalf("qa's share admits the pod (%q); the test wants a queue at its share", why)
	}
	if got := opened(plan); !slices.Equal(got, []string{"qa-w"}) || len(plan.held) != 0 {
		t.Fatalf("ungated %v, held %+v; want qa-w ungated: no free card in the cluster could take it", got, plan.held)
	}
}
