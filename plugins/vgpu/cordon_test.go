package vgpu

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/actions/preempt"
	"volcano.sh/volcano/pkg/scheduler/actions/reclaim"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// cordonNode is gpuNode with the given cards (by index) cordoned for reason.
func cordonNode(name string, cards int, reason string, cordoned ...int) *corev1.Node {
	n := gpuNode(name, cards, "NVIDIA A100", 40960)
	c := &api.NodeCordons{Cards: map[string]api.CardCordon{}}
	for _, i := range cordoned {
		c.Cards[cardUUID(name, i)] = api.CardCordon{Reason: reason, Since: time.Now()}
	}
	s, err := api.EncodeCordons(c)
	if err != nil {
		panic(err)
	}
	n.Annotations[api.AnnotationCordonedCards] = s
	return n
}

func cardUUID(node string, i int) string { return "GPU-" + node + "-" + string(rune('0'+i)) }

// A cordoned card takes no task from the next session on; the pod on it keeps its
// cards; a new pod goes to another card (binpack would have chosen the busier cordoned
// one), or, when no card is left, stays pending with the card and the administrator's
// reason in its FitErrors.
func TestACordonedCardIsSkippedAndItsPodKept(t *testing.T) {
	holder := holding("holder", "n", "GPU-n-0", 30, 1)
	holder.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg"
	utc := &uthelper.TestCommonStruct{Nodes: []*corev1.Node{cordonNode("n", 2, "ECC errors", 0)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1), podGroup("pg-new", 1)},
		Pods:      []*corev1.Pod{holder, vgpuPod("new", "pg-new", 1, 1000, 10, nil)}, Queues: queues()}
	ssn, p := session(t, utc, true, nil)
	a := taskAssignments(t, ssn)
	if got := a["new"]; got == nil || got.Containers[0].Cards[0].UUID != "GPU-n-1" {
		t.Fatalf("the new pod got %+v, want card GPU-n-1 beside the cordoned GPU-n-0; %s", got, jobMessage(ssn))
	}
	if got := a["holder"]; got == nil || got.Containers[0].Cards[0].UUID != "GPU-n-0" {
		t.Errorf("the running pod's assignment is %+v, want it untouched on GPU-n-0", got)
	}
	p.ledger.EachCard(func(_ string, c *placement.CardState) {
		if c.UUID == "GPU-n-0" && (c.Used.Tenants != 1 || c.Used.MemoryMiB != 20000) {
			t.Errorf("the cordoned card books %+v, want its running pod's 20000 MiB", c.Used)
		}
	})
}

// Cordoned nodes n1 and n2, and node m whose one card a pod of queue q2 holds whole:
// the new pod of q1 waits, and its FitErrors carry, for n1 and n2, the card and the
// administrator's reason, unresolvable (preempt and reclaim evict nothing there), and
// for m its own. (With every card of the cluster cordoned, the queue share
// has nothing to divide and refuses first: docs/troubleshooting.md.)
func TestWithEveryFreeCardCordonedThePodWaitsWithTheReason(t *testing.T) {
	busy := holding("busy", "m", "GPU-m-0", 100, 1)
	busy.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-busy"
	utc := &uthelper.TestCommonStruct{
		Nodes: []*corev1.Node{cordonNode("n1", 2, "RMA #4411", 0, 1), cordonNode("n2", 1, "", 0), gpuNode("m", 1, "NVIDIA A100", 40960)},
		PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1),
			util.BuildPodGroup("pg-busy", "ns", "q2", 1, nil, schedulingv1.PodGroupRunning)},
		Pods:   []*corev1.Pod{busy, vgpuPod("p", "pg", 1, 1000, 10, nil)},
		Queues: []*schedulingv1.Queue{util.BuildQueue("q1", 1, nil), util.BuildQueue("q2", 1, nil)}}
	ssn, p := session(t, utc, true, nil)
	if a := taskAssignments(t, ssn)["p"]; a != nil {
		t.Fatalf("placed on %+v, want pending", a)
	}
	found := false
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.Name != "p" {
				continue
			}
			found = true
			fe := job.NodesFitErrors[task.UID]
			if fe == nil {
				t.Fatalf("no FitErrors for the pending task (the job says %q); a cordon is a pause, not a smaller cluster", job.JobFitErrors)
			}
			for _, want := range []string{
				`vgpu: container "main" needs 1 cards, 0 of 2 fit (2 cordoned): card GPU-n1-0 is cordoned: RMA #4411 (and 1 more cordoned)`,
				`vgpu: container "main" needs 1 cards, 0 of 1 fit (1 cordoned): card GPU-n2-0 is cordoned`,
				`0 of 1 fit (1 insufficient cores)`,
			} {
				if !strings.Contains(fe.Error(), want) {
					t.Errorf("FitErrors %q\nwant it to contain %q", fe.Error(), want)
				}
			}
			for _, node := range []string{"n1", "n2"} {
				if _, ok := fe.GetUnschedulableAndUnresolvableNodes()[node]; !ok {
					t.Errorf("node %s is resolvable in %q; evicting cannot uncordon a card", node, fe.Error())
				}
			}
		}
	}
	if !found {
		t.Fatal("the pending task is not in the session")
	}
	p.publishMetrics(ssn)
	m := p.metrics
	if got := testutil.ToFloat64(m.pending.WithLabelValues(string(placement.ReasonCordoned))); got != 1 {
		t.Errorf("pending by %q = %v, want 1", placement.ReasonCordoned, got)
	}
	if got := testutil.ToFloat64(m.pending.WithLabelValues(string(placement.ReasonUnhealthy))); got != 0 {
		t.Errorf("pending by %q = %v, want 0: a cordon is not a fault", placement.ReasonUnhealthy, got)
	}
	if c, u := testutil.ToFloat64(m.outOfService.WithLabelValues(outCordoned)), testutil.ToFloat64(m.outOfService.WithLabelValues(outUnhealthy)); c != 3 || u != 0 {
		t.Errorf("cards out of service: %v cordoned, %v unhealthy; want 3 and 0", c, u)
	}
}

// A cordon this build cannot read refuses the whole node with the decoder's error
// (the pod goes to another node, or waits with the reason); CPU-only tasks never
// notice a cordon.
func TestAnUnreadableCordonRefusesTheNodeAndSparesCPUTasks(t *testing.T) {
	bad := gpuNode("bad", 2, "NVIDIA A100", 40960)
	bad.Annotations[api.AnnotationCordonedCards] = `{"version":"v1","cards":{"GPU-bad-0":{"reason":"fan"}}}`
	for _, tc := range []struct {
		name     string
		nodes    []*corev1.Node
		wantNode string
	}{
		{"the pod goes to the other node", []*corev1.Node{bad, gpuNode("good", 1, "NVIDIA A100", 40960)}, "good"},
		{"the pod waits with the reason", []*corev1.Node{bad}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			utc := &uthelper.TestCommonStruct{Nodes: tc.nodes, PodGroups: []*schedulingv1.PodGroup{podGroup("pg", 1), podGroup("pg-cpu", 1)},
				Pods: []*corev1.Pod{vgpuPod("p", "pg", 1, 1000, 10, nil), cpuPod("cpu", "pg-cpu")}, Queues: queues()}
			ssn, _ := session(t, utc, true, nil)
			a := taskAssignments(t, ssn)["p"]
			if tc.wantNode != "" {
				if a == nil || a.Node != tc.wantNode {
					t.Fatalf("placed on %+v, want %s; %s", a, tc.wantNode, jobMessage(ssn))
				}
			} else if a != nil {
				t.Fatalf("placed on %+v, want pending", a)
			}
			if msg := jobMessage(ssn); tc.wantNode == "" && !strings.Contains(msg, `tessera.io/cordoned-cards: cards["GPU-bad-0"].since: missing`) {
				t.Errorf("reason %q does not quote the bad field", msg)
			}
			for _, job := range ssn.Jobs {
				for _, task := range job.Tasks {
					if task.Name == "cpu" && task.NodeName == "" {
						t.Errorf("the CPU-only task was not placed: %s", jobMessage(ssn))
					}
				}
			}
		})
	}
}

// Preempt evicts nothing on a node whose only card is cordoned: the waiting task's
// refusal there is unresolvable, as for an unhealthy card. The control, the same scene
// without the cordon, evicts the low-priority holder.
func TestPreemptEvictsNothingForACordonedCard(t *testing.T) {
	for _, cordon := range []bool{false, true} {
		tc := preemptScene("low", nil)
		if cordon {
			tc.Nodes = []*corev1.Node{cordonNode("n1", 1, "drain", 0)}
		}
		_, got := runEvict(t, tc, allocate.New(), preempt.New())
		switch {
		case cordon && len(got) != 0:
			t.Errorf("preempt evicted %v for a card no eviction makes usable", got)
		case !cordon && (len(got) != 1 || got[0] != "ns/holder"):
			t.Errorf("control: preempt evicted %v without the cordon, want ns/holder", got)
		}
	}
}

// Queue a holds the cards of n1 and n2 with an elastic job; queue b asks for one card.
// With n1's card cordoned, reclaim takes back the pod on n2, never the one on the
// cordoned card, whose eviction would free nothing b could use.
func TestReclaimEvictsOnlyWhereTheCardsTakeTheTask(t *testing.T) {
	for _, cordon := range []bool{false, true} {
		n1 := gpuNode("n1", 1, "NVIDIA A100", 40960)
		if cordon {
			n1 = cordonNode("n1", 1, "fan", 0)
		}
		tc := &uthelper.TestCommonStruct{
			Nodes:  []*corev1.Node{n1, gpuNode("n2", 1, "NVIDIA A100", 40960)},
			Queues: []*schedulingv1.Queue{util.BuildQueue("a", 1, nil), util.BuildQueue("b", 1, nil)},
			PodGroups: []*schedulingv1.PodGroup{util.BuildPodGroup("pg-a", "ns", "a", 1, nil, schedulingv1.PodGroupRunning),
				util.BuildPodGroup("pg-b", "ns", "b", 1, nil, schedulingv1.PodGroupInqueue)},
		}
		for _, node := range []string{"n1", "n2"} {
			p := holding("a-"+node, node, "GPU-"+node+"-0", 100, 1)
			p.Annotations[schedulingv1.KubeGroupNameAnnotationKey] = "pg-a"
			tc.Pods = append(tc.Pods, p)
		}
		tc.Pods = append(tc.Pods, vgpuPod("b-0", "pg-b", 1, 20000, 100, nil))
		_, got := runEvict(t, tc, allocate.New(), reclaim.New())
		switch {
		case cordon && (len(got) != 1 || got[0] != "ns/a-n2"):
			t.Errorf("reclaim evicted %v with n1's card cordoned, want ns/a-n2 alone", got)
		case !cordon && len(got) != 1:
			t.Errorf("control: reclaim evicted %v, want one of queue a's pods", got)
		}
	}
}

// The out-of-service gauge counts unhealthy and cordoned cards apart; a card both
// counts in each, and a healthy card in neither.
func TestOutOfServiceCountsCordonedApartFromUnhealthy(t *testing.T) {
	cordon := &api.CardCordon{Reason: "fan", Since: time.Now()}
	cards := []placement.CardState{
		{Card: api.Card{UUID: "GPU-0", Healthy: true}},
		{Card: api.Card{UUID: "GPU-1", Healthy: false}},
		{Card: api.Card{UUID: "GPU-2", Healthy: true, Cordon: cordon}},
		{Card: api.Card{UUID: "GPU-3", Healthy: false, Cordon: cordon}},
	}
	m := newMetrics(nil)
	m.publishOutOfService(func(fn func(string, *placement.CardState)) {
		for i := range cards {
			fn("n", &cards[i])
		}
	})
	for reason, want := range map[string]float64{outUnhealthy: 2, outCordoned: 2} {
		if got := testutil.ToFloat64(m.outOfService.WithLabelValues(reason)); got != want {
			t.Errorf("%s cards: %v, want %v", reason, got, want)
		}
	}
}
