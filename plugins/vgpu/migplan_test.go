package vgpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/mig"
)

// optedInMIGNode is migGPUNode (card 0: two free 3g.40gb) whose agent re-partitions.
func optedInMIGNode(name string) *corev1.Node {
	n := migGPUNode(name, 2)
	n.Annotations[api.AnnotationMIGRepartition] = "true"
	return n
}

// withMIGPlan puts a plan for card 0 on the node, created at created, and, when
// outcome is set, the agent's answer to it at answered.
func withMIGPlan(t *testing.T, n *corev1.Node, created time.Time, outcome string, answered time.Time) *corev1.Node {
	t.Helper()
	plan := &api.MIGPlan{ID: "p1", Card: "GPU-" + n.Name + "-0", Profiles: []string{"4g.40gb", "3g.40gb"}, Created: created.UTC().Format(time.RFC3339)}
	enc, err := api.EncodeMIGPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[api.AnnotationMIGPlan] = enc
	if outcome != "" {
		s, err := api.EncodeMIGPlanStatus(&api.MIGPlanStatus{ID: "p1", Card: plan.Card, Outcome: outcome, Time: answered.UTC().Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[api.AnnotationMIGPlanStatus] = s
	}
	return n
}

// cardCordon is the reason card uuid of node takes no pod in the session's ledger.
func cardCordon(p *vgpuPlugin, node, uuid string) string {
	why := ""
	p.ledger.EachCard(func(on string, c *placement.CardState) {
		if on == node && c.UUID == uuid && c.Cordon != nil {
			why = c.Cordon.Reason
		}
	})
	return why
}

func migPlanSession(t *testing.T, nodes []*corev1.Node, pods ...*corev1.Pod) (*framework.Session, *vgpuPlugin) {
	t.Helper()
	pgs := []*schedulingv1.PodGroup{}
	for _, p := range pods {
		pgs = append(pgs, podGroup(p.Annotations[schedulingv1.KubeGroupNameAnnotationKey], 1))
	}
	return session(t, &uthelper.TestCommonStruct{Nodes: nodes, PodGroups: pgs, Pods: pods, Queues: queues()}, true, nil)
}

// A pod asking for a 2g.20gb, which no card has, gets card 0 of the opted-in node
// re-partitioned: the card takes no pod this session and the pod's reasons name
// the plan. The same pods beside a node that does not opt in, or whose card is held,
// get no plan.
func TestAnIdleOptedInCardIsPlannedForPendingProfiles(t *testing.T) {
	t.Run("an idle card of an opted-in node gets a plan", func(t *testing.T) {
		ssn, p := migPlanSession(t, []*corev1.Node{optedInMIGNode("n")}, migPod("a", "pg-a", "2g.20gb", 1))
		why := cardCordon(p, "n", "GPU-n-0")
		if !strings.Contains(why, "waiting for n's card GPU-n-0 to be re-partitioned to 2g.20gb+3g.40gb") {
			t.Fatalf("card 0 blocked for %q, want a plan holding the 2g.20gb and one of the 3g.40gb", why)
		}
		if got := taskAssignments(t, ssn); len(got) != 0 {
			t.Fatalf("placed %v while the card is being re-partitioned", got)
		}
		if msg := jobMessage(ssn); !strings.Contains(msg, "cards: 1 cordoned") || strings.Contains(msg, "can run in this cluster") {
			t.Errorf("the pending pod's reasons %q, want the card counted as cordoned, not a pod that can never run", msg)
		}
	})
	t.Run("a node that does not opt in gets none", func(t *testing.T) {
		_, p := migPlanSession(t, []*corev1.Node{migGPUNode("n", 2)}, migPod("a", "pg-a", "2g.20gb", 1))
		if why := cardCordon(p, "n", "GPU-n-0"); why != "" {
			t.Fatalf("card 0 blocked for %q on a node that does not opt in", why)
		}
	})
	t.Run("a card with a holder gets none", func(t *testing.T) {
		holder := migPod("holder", "pg-holder", "3g.40gb", 1)
		holder.Spec.NodeName, holder.Status.Phase = "n", corev1.PodRunning
		holder.Annotations[api.AnnotationAssignment] = `{"version":"v1","node":"n","qos":"fixed-share","containers":[{"name":"main",` +
			`"cards":[{"uuid":"GPU-n-0","memoryMiB":40320,"cores":100,"mig":"MIG-n-0"}]}]}`
		_, p := migPlanSession(t, []*corev1.Node{optedInMIGNode("n")}, holder, migPod("a", "pg-a", "2g.20gb", 1))
		if why := cardCordon(p, "n", "GPU-n-0"); why != "" {
			t.Fatalf("card 0 blocked for %q although a pod holds one of its instances", why)
		}
	})
	t.Run("a free instance of the profile elsewhere means no plan", func(t *testing.T) {
		_, p := migPlanSession(t, []*corev1.Node{optedInMIGNode("n")}, migPod("a", "pg-a", "3g.40gb", 1))
		if why := cardCordon(p, "n", "GPU-n-0"); why != "" {
			t.Fatalf("card 0 blocked for %q although a 3g.40gb is free", why)
		}
	})
}

// While a plan waits for the agent its card takes no pod, even one its current
// layout would hold; once the agent's answer is final the card takes pods again, and
// a card whose plan failed is planned again after the retry delay, not before.
func TestACardBeingRepartitionedTakesNoPod(t *testing.T) {
	now := time.Now()
	t.Run("an outstanding plan keeps pods off the card", func(t *testing.T) {
		n := withMIGPlan(t, optedInMIGNode("n"), now.Add(-time.Minute), "", time.Time{})
		ssn, p := migPlanSession(t, []*corev1.Node{n}, migPod("a", "pg-a", "3g.40gb", 1))
		if got := taskAssignments(t, ssn); len(got) != 0 {
			t.Fatalf("placed %v on a card being re-partitioned", got)
		}
		if why := cardCordon(p, "n", "GPU-n-0"); !strings.Contains(why, "(MIG plan p1)") {
			t.Fatalf("card 0 blocked for %q, want the outstanding plan", why)
		}
	})
	t.Run("a failed plan frees the card for pods", func(t *testing.T) {
		n := withMIGPlan(t, optedInMIGNode("n"), now.Add(-time.Minute), api.MIGPlanFailedRolledBack, now.Add(-30*time.Second))
		ssn, _ := migPlanSession(t, []*corev1.Node{n}, migPod("a", "pg-a", "3g.40gb", 1))
		if got := taskAssignments(t, ssn); got["a"] == nil {
			t.Fatalf("the pod was not placed on the card whose plan failed; %s", jobMessage(ssn))
		}
	})
	t.Run("a recently failed card is not planned again", func(t *testing.T) {
		n := withMIGPlan(t, optedInMIGNode("n"), now.Add(-time.Minute), api.MIGPlanRefusedBusy, now.Add(-30*time.Second))
		_, p := migPlanSession(t, []*corev1.Node{n}, migPod("a", "pg-a", "2g.20gb", 1))
		if why := cardCordon(p, "n", "GPU-n-0"); why != "" {
			t.Fatalf("card 0 blocked for %q within the retry delay", why)
		}
	})
	t.Run("a failed plan frees the card for a later plan", func(t *testing.T) {
		n := withMIGPlan(t, optedInMIGNode("n"), now.Add(-10*time.Minute), api.MIGPlanFailedRolledBack, now.Add(-3*time.Minute))
		_, p := migPlanSession(t, []*corev1.Node{n}, migPod("a", "pg-a", "2g.20gb", 1))
		why := cardCordon(p, "n", "GPU-n-0")
		if !strings.Contains(why, "re-partitioned to 2g.20gb+3g.40gb") || strings.Contains(why, "plan p1") {
			t.Fatalf("card 0 blocked for %q, want a new plan", why)
		}
	})
	t.Run("an unanswered plan expires", func(t *testing.T) {
		n := withMIGPlan(t, optedInMIGNode("n"), now.Add(-migPlanTimeout-time.Second), "", time.Time{})
		ssn, _ := migPlanSession(t, []*corev1.Node{n}, migPod("a", "pg-a", "3g.40gb", 1))
		if got := taskAssignments(t, ssn); got["a"] == nil {
			t.Fatalf("the pod was not placed on the card whose plan expired; %s", jobMessage(ssn))
		}
	})
}

// Demand is met by free instances first, in the order the pods wait; an opted-in
// node gets one plan per session, on its first idle card the unmet demand fits.
func TestChooseMIGPlans(t *testing.T) {
	card := func(uuid string, free map[string]int, plannable bool) migCardView {
		return migCardView{UUID: uuid, Model: "NVIDIA H100 80GB HBM3", Free: free, Plannable: plannable}
	}
	nodes := []migNodeView{
		{Name: "a", OptedIn: false, Cards: []migCardView{card("A0", map[string]int{"1g.10gb": 1}, true)}},
		{Name: "b", OptedIn: true, Cards: []migCardView{card("B0", nil, false), card("B1", nil, true), card("B2", nil, true)}},
		{Name: "c", OptedIn: true, Busy: true, Cards: []migCardView{card("C0", nil, true)}},
		{Name: "d", OptedIn: true, Cards: []migCardView{card("D0", nil, true)}},
	}
	demand := []migDemand{{Profile: "1g.10gb", Pod: "p1"}, {Profile: "7g.80gb", Pod: "p2"}, {Profile: "7g.80gb", Pod: "p3"}, {Profile: "1g.10gb", Pod: "p4"}}
	got := chooseMIGPlans(nodes, demand)
	if len(got) != 2 || got[0].Card.UUID != "B1" || got[1].Card.UUID != "D0" {
		t.Fatalf("planned %+v, want B1 (the first plannable card of the first opted-in node) and D0", got)
	}
	if p := got[0].Choice.Profiles; len(p) != 1 || p[0] != "7g.80gb" || got[0].Served[0].Pod != "p2" {
		t.Errorf("B1 gets %v for %v, want 7g.80gb for p2 (p1 takes the free 1g.10gb)", p, got[0].Served)
	}
	if p := got[1].Choice.Profiles; len(p) != 1 || p[0] != "7g.80gb" || got[1].Served[0].Pod != "p3" {
		t.Errorf("D0 gets %v for %v, want 7g.80gb for p3", p, got[1].Served)
	}
}

// A new plan lands only on the node as the session read it; a removal takes away
// only the plan the session read.
func TestMIGPlanPatchTouchesOnlyWhatTheSessionRead(t *testing.T) {
	read := optedInMIGNode("n")
	read.ResourceVersion = "7"
	get := func(c *fake.Clientset) string {
		n, err := c.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[api.AnnotationMIGPlan]
	}
	client := fake.NewSimpleClientset(read.DeepCopy())
	writeMIGPlan(context.Background(), client, migPlanWrite{node: read, value: "new"})
	if got := get(client); got != "new" {
		t.Fatalf("plan %q after writing onto the node as read", got)
	}
	changed := read.DeepCopy()
	changed.ResourceVersion = "8"
	client = fake.NewSimpleClientset(changed)
	writeMIGPlan(context.Background(), client, migPlanWrite{node: read, value: "new"})
	if got := get(client); got != "" {
		t.Fatalf("plan %q written onto a node that changed since the session read it", got)
	}
	stored := read.DeepCopy()
	stored.Annotations[api.AnnotationMIGPlan] = "other"
	client = fake.NewSimpleClientset(stored)
	writeMIGPlan(context.Background(), client, migPlanWrite{node: read, old: "mine"})
	if got := get(client); got != "other" {
		t.Fatalf("plan %q: a removal took away a plan the session did not read", got)
	}
	writeMIGPlan(context.Background(), client, migPlanWrite{node: read, old: "other"})
	if got := get(client); got != "" {
		t.Fatalf("plan %q left after removing it", got)
	}
}

// migScene opens a session through a scheduler cache whose API server fake holds the
// node too, so that the session's plan writes land there.
func migScene(t *testing.T, node *corev1.Node, pods ...*corev1.Pod) (*cache.SchedulerCache, *record.FakeRecorder) {
	t.Helper()
	testSched = NewScheduler()
	t.Cleanup(testSched.Close)
	events := record.NewFakeRecorder(100)
	sc := cache.NewCustomMockSchedulerCache("utmock-scheduler", util.NewFakeBinder(10), util.NewFakeEvictor(10),
		&util.FakeStatusUpdater{}, nil, events)
	sc.AddOrUpdateNode(node)
	if _, err := sc.Client().CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc.AddQueueV1beta1(queues()[0])
	for _, p := range pods {
		sc.AddPodGroupV1beta1(podGroup(p.Annotations[schedulingv1.KubeGroupNameAnnotationKey], 1))
		sc.AddPod(p)
	}
	uthelper.RegisterPlugins(builders(nil))
	t.Cleanup(framework.CleanupPluginBuilders)
	ssn := framework.OpenSession(sc, tiers(true, nil), nil)
	t.Cleanup(func() { framework.CloseSession(ssn) })
	return sc, events
}

// nodePlan waits up to 10 s for the node's plan annotation to satisfy done.
func nodePlan(t *testing.T, sc *cache.SchedulerCache, done func(v string, ok bool) bool) (string, bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := sc.Client().CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Annotations[api.AnnotationMIGPlan]
		if done(v, ok) || time.Now().After(deadline) {
			return v, ok
		}
	}
}

// Through a scheduler cache and its API server fake: the session writes the plan on
// the Node (decodable, for card 0, with the profiles the pending pod needs) and tells
// the pod's PodGroup what it waits for.
func TestAPlanIsWrittenOnTheNodeAndAnnounced(t *testing.T) {
	sc, events := migScene(t, optedInMIGNode("n"), migPod("a", "pg-a", "2g.20gb", 1))
	v, ok := nodePlan(t, sc, func(_ string, ok bool) bool { return ok })
	if !ok {
		t.Fatal("no plan written on the node")
	}
	plan, err := api.DecodeMIGPlan(v)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Card != "GPU-n-0" || strings.Join(plan.Profiles, "+") != "2g.20gb+3g.40gb" {
		t.Fatalf("plan %+v, want card GPU-n-0 to hold 2g.20gb+3g.40gb", plan)
	}
	select {
	case e := <-events.Events:
		if !strings.Contains(e, migPlanEvent) || !strings.Contains(e, "waiting for n's card GPU-n-0 to be re-partitioned to 2g.20gb+3g.40gb (MIG plan "+plan.ID+")") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no event on the pod's PodGroup")
	}
}

// A plan the agent has answered is removed from the Node; one still waiting stays.
func TestAnAnsweredPlanIsRemoved(t *testing.T) {
	now := time.Now()
	sc, _ := migScene(t, withMIGPlan(t, optedInMIGNode("n"), now.Add(-time.Minute), api.MIGPlanApplied, now))
	if _, ok := nodePlan(t, sc, func(_ string, ok bool) bool { return !ok }); ok {
		t.Fatal("the answered plan is still on the node")
	}
	sc, _ = migScene(t, withMIGPlan(t, optedInMIGNode("n"), now.Add(-time.Minute), "", time.Time{}))
	time.Sleep(200 * time.Millisecond)
	if _, ok := nodePlan(t, sc, func(_ string, ok bool) bool { return true }); !ok {
		t.Fatal("a plan still waiting for the agent was removed")
	}
}

// A card is planned only for the demand of pods that may be placed on it: the node
// matches the pod's node selector and required node affinity, the pod tolerates the
// node's NoSchedule and NoExecute taints, and its card filters allow the card. A
// free instance the pod may not use does not meet its demand.
func TestChooseMIGPlansServesOnlyCardsThePodMayUse(t *testing.T) {
	const h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
	node := func(name, model string, labels map[string]string, taints ...corev1.Taint) migNodeView {
		n := &corev1.Node{}
		n.Name, n.Labels, n.Spec.Taints = name, labels, taints
		return migNodeView{Name: name, Node: n, OptedIn: true, Cards: []migCardView{{UUID: "GPU-" + name, Model: model,
			Current: mig.Geometry{{Profile: "3g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 4}}, Plannable: true}}}
	}
	pinned := func(key, value string) *migPodLimits {
		pod := &corev1.Pod{}
		pod.Spec.NodeSelector = map[string]string{key: value}
		return &migPodLimits{Affinity: nodeaffinity.GetRequiredNodeAffinity(pod)}
	}
	noSchedule := corev1.Taint{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	noExecute := corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}
	preferNo := corev1.Taint{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}
	tolerates := func(tolerations ...corev1.Toleration) *migPodLimits { return &migPodLimits{Tolerations: tolerations} }
	for _, tc := range []struct {
		name  string
		nodes []migNodeView
		where *migPodLimits
		want  []string // cards planned, in order
	}{
		{"a pod pinned by node selector to b gets b's card, not a's",
			[]migNodeView{node("a", h100, nil), node("b", h100, map[string]string{"zone": "b"})}, pinned("zone", "b"), []string{"GPU-b"}},
		{"a pod pinned to a label no node has gets no plan",
			[]migNodeView{node("a", h100, nil), node("b", h100, map[string]string{"zone": "b"})}, pinned("zone", "c"), nil},
		{"a pod pinned by required node affinity gets its node's card", []migNodeView{node("a", h100, nil), node("b", h100, nil)},
			&migPodLimits{Affinity: nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}}}}}}})},
			[]string{"GPU-b"}},
		{"a type filter excluding H100 gets no plan on H100 nodes",
			[]migNodeView{node("a", h100, nil), node("b", h100, nil)}, &migPodLimits{Filters: api.PodOptions{TypeExclude: []string{"h100"}}}, nil},
		{"a type filter excluding H100 gets the A100's card",
			[]migNodeView{node("a", h100, nil), node("b", a100, nil)}, &migPodLimits{Filters: api.PodOptions{TypeExclude: []string{"H100"}}}, []string{"GPU-b"}},
		{"a type filter including A100 gets the A100's card",
			[]migNodeView{node("a", h100, nil), node("b", a100, nil)}, &migPodLimits{Filters: api.PodOptions{TypeInclude: []string{"a100"}}}, []string{"GPU-b"}},
		{"a UUID filter excluding a's card gets b's",
			[]migNodeView{node("a", h100, nil), node("b", h100, nil)}, &migPodLimits{Filters: api.PodOptions{UUIDExclude: []string{"GPU-a"}}}, []string{"GPU-b"}},
		{"an untolerated NoSchedule taint blocks the node",
			[]migNodeView{node("a", h100, nil, noSchedule), node("b", h100, nil)}, nil, []string{"GPU-b"}},
		{"an untolerated NoExecute taint blocks the node",
			[]migNodeView{node("a", h100, nil, noExecute)}, nil, nil},
		{"a PreferNoSchedule taint does not block", []migNodeView{node("a", h100, nil, preferNo)}, nil, []string{"GPU-a"}},
		{"a tolerated NoSchedule taint does not block", []migNodeView{node("a", h100, nil, noSchedule), node("b", h100, nil)},
			tolerates(corev1.Toleration{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}),
			[]string{"GPU-a"}},
		{"a toleration of another value does not tolerate", []migNodeView{node("a", h100, nil, noSchedule), node("b", h100, nil)},
			tolerates(corev1.Toleration{Key: "team", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoSchedule}),
			[]string{"GPU-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			demand := []migDemand{{Profile: "2g.20gb", Pod: "p", Where: tc.where}}
			var got []string
			for _, pl := range chooseMIGPlans(tc.nodes, demand) {
				got = append(got, pl.Card.UUID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("planned %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a free instance the pod may not use does not meet its demand", func(t *testing.T) {
		free := node("a", h100, nil)
		free.Cards[0].Free, free.Cards[0].Plannable = map[string]int{"2g.20gb": 1}, false
		nodes := []migNodeView{free, node("b", h100, map[string]string{"zone": "b"})}
		got := chooseMIGPlans(nodes, []migDemand{{Profile: "2g.20gb", Pod: "p", Where: pinned("zone", "b")}})
		if len(got) != 1 || got[0].Card.UUID != "GPU-b" {
			t.Fatalf("planned %+v, want b's card: the free 2g.20gb is on a node the pod may not use", got)
		}
		if got := chooseMIGPlans(nodes, []migDemand{{Profile: "2g.20gb", Pod: "p"}}); len(got) != 0 {
			t.Fatalf("planned %+v for a pod that may take the free 2g.20gb", got)
		}
	})
	t.Run("pods of different limits share a card only where both may go", func(t *testing.T) {
		nodes := []migNodeView{node("a", h100, nil), node("b", h100, map[string]string{"zone": "b"})}
		demand := []migDemand{{Profile: "2g.20gb", Pod: "pinned", Where: pinned("zone", "b")}, {Profile: "2g.20gb", Pod: "free"},
			{Profile: "1g.20gb", Pod: "h100-less", Where: &migPodLimits{Filters: api.PodOptions{TypeExclude: []string{"H100"}}}}}
		got := chooseMIGPlans(nodes, demand)
		if len(got) != 2 || got[0].Card.UUID != "GPU-a" || got[1].Card.UUID != "GPU-b" {
			t.Fatalf("planned %+v, want a's card then b's", got)
		}
		pods := func(pl migPlanned) (out []string) {
			for _, d := range pl.Served {
				out = append(out, d.Pod)
			}
			return out
		}
		if a, b := pods(got[0]), pods(got[1]); !slices.Equal(a, []string{"free"}) || !slices.Equal(b, []string{"pinned"}) {
			t.Fatalf("a serves %v and b %v, want free on a and pinned on b, and no card for the pod that excludes H100", a, b)
		}
	})
}

// Pods with the same limits share one value, so each node is judged once for all of
// them; a pod without any has none; pods without MIG profiles are not in the demand.
func TestPendingMIGDemandSharesLimits(t *testing.T) {
	withSelector := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.NodeSelector = map[string]string{"zone": "b"}
		return p
	}
	pods := []*corev1.Pod{withSelector(migPod("a", "pg-a", "2g.20gb", 1)), withSelector(migPod("b", "pg-b", "2g.20gb", 1)),
		migPod("c", "pg-c", "2g.20gb", 1), vgpuPod("d", "pg-d", 1, 1000, 10, nil), cpuPod("e", "pg-e")}
	ssn, p := migPlanSession(t, []*corev1.Node{optedInMIGNode("n")}, pods...)
	byPod := map[string]*migPodLimits{}
	for _, d := range p.pendingMIGDemand(ssn) {
		byPod[d.Pod] = d.Where
	}
	if len(byPod) != 3 {
		t.Fatalf("demand of %d pods (%v), want the three MIG pods only", len(byPod), byPod)
	}
	if byPod["ns/a"] == nil || byPod["ns/a"] != byPod["ns/b"] {
		t.Errorf("pods a and b with the same node selector got limits %p and %p, want one shared value", byPod["ns/a"], byPod["ns/b"])
	}
	if byPod["ns/c"] != nil {
		t.Errorf("pod c without limits got %+v", byPod["ns/c"])
	}
}

// Through a Volcano session with two opted-in nodes: a pod whose node selector names
// only b gets b's card planned and a's left alone; a pod that does not tolerate a's
// NoSchedule taint gets b's; a pod whose type filter excludes H100 gets neither.
func TestAPlanGoesToANodeThePodMayUse(t *testing.T) {
	zoned := func(name string) *corev1.Node {
		n := optedInMIGNode(name)
		n.Labels["zone"] = name
		return n
	}
	t.Run("node selector", func(t *testing.T) {
		pod := migPod("a", "pg-a", "2g.20gb", 1)
		pod.Spec.NodeSelector = map[string]string{"zone": "b"}
		_, p := migPlanSession(t, []*corev1.Node{zoned("a"), zoned("b")}, pod)
		if why := cardCordon(p, "a", "GPU-a-0"); why != "" {
			t.Fatalf("a's card blocked for %q, a node the pod's selector excludes", why)
		}
		if why := cardCordon(p, "b", "GPU-b-0"); !strings.Contains(why, "re-partitioned to 2g.20gb+3g.40gb") {
			t.Fatalf("b's card blocked for %q, want a plan for the pod pinned there", why)
		}
	})
	t.Run("taint", func(t *testing.T) {
		a, b := zoned("a"), zoned("b")
		a.Spec.Taints = []corev1.Taint{{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
		_, p := migPlanSession(t, []*corev1.Node{a, b}, migPod("a", "pg-a", "2g.20gb", 1))
		if why := cardCordon(p, "a", "GPU-a-0"); why != "" {
			t.Fatalf("a's card blocked for %q, on a node whose taint the pod does not tolerate", why)
		}
		if why := cardCordon(p, "b", "GPU-b-0"); !strings.Contains(why, "re-partitioned to 2g.20gb+3g.40gb") {
			t.Fatalf("b's card blocked for %q, want a plan", why)
		}
	})
	t.Run("card filter", func(t *testing.T) {
		pod := migPod("a", "pg-a", "2g.20gb", 1)
		pod.Annotations[api.AnnotationGPUTypeExclude] = "H100"
		_, p := migPlanSession(t, []*corev1.Node{zoned("a"), zoned("b")}, pod)
		for _, n := range []string{"a", "b"} {
			if why := cardCordon(p, n, "GPU-"+n+"-0"); why != "" {
				t.Fatalf("%s's H100 blocked for %q, for a pod that excludes H100", n, why)
			}
		}
	})
}

// On random clusters and demand, every instance a plan serves belongs to a pod that
// may use the planned card: its node selector, taints and card filters allow it.
func TestEveryPlannedInstanceMayUseItsCard(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	models := []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}
	profiles := []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	taint := corev1.Taint{Key: "t", Effect: corev1.TaintEffectNoSchedule}
	for round := 0; round < 300; round++ {
		var nodes []migNodeView
		for n := 0; n < 1+rng.IntN(6); n++ {
			node := &corev1.Node{}
			node.Name, node.Labels = fmt.Sprintf("n%d", n), map[string]string{"zone": fmt.Sprint(rng.IntN(3))}
			if rng.IntN(3) == 0 {
				node.Spec.Taints = []corev1.Taint{taint}
			}
			v := migNodeView{Name: node.Name, Node: node, OptedIn: rng.IntN(4) > 0}
			for c := 0; c < 1+rng.IntN(3); c++ {
				v.Cards = append(v.Cards, migCardView{UUID: fmt.Sprintf("GPU-%d-%d", n, c), Index: c, Model: models[rng.IntN(2)],
					Plannable: true, Free: map[string]int{profiles[rng.IntN(len(profiles))]: rng.IntN(2)}})
			}
			nodes = append(nodes, v)
		}
		limits := []*migPodLimits{nil}
		for k := 0; k < 4; k++ {
			pod := &corev1.Pod{}
			if rng.IntN(2) == 0 {
				pod.Spec.NodeSelector = map[string]string{"zone": fmt.Sprint(rng.IntN(3))}
			}
			if rng.IntN(2) == 0 {
				pod.Spec.Tolerations = []corev1.Toleration{{Key: "t", Operator: corev1.TolerationOpExists}}
			}
			o := api.PodOptions{}
			switch rng.IntN(3) {
			case 0:
				o.TypeExclude = []string{"h100"}
			case 1:
				o.UUIDInclude = []string{fmt.Sprintf("GPU-%d-0", rng.IntN(6))}
			}
			limits = append(limits, migLimitsBook{}.of(pod, &o))
		}
		var demand []migDemand
		for i := 0; i < rng.IntN(20); i++ {
			demand = append(demand, migDemand{Profile: profiles[rng.IntN(len(profiles))], Pod: fmt.Sprint("p", i), Where: limits[rng.IntN(len(limits))]})
		}
		for _, pl := range chooseMIGPlans(nodes, demand) {
			var node *corev1.Node
			for _, n := range nodes {
				if n.Name == pl.Node {
					node = n.Node
				}
			}
			for _, d := range pl.Served {
				if !d.Where.allowsNode(node) || !d.Where.allowsCard(&pl.Card) {
					t.Fatalf("round %d: %s's card %s serves %s, whose limits %+v refuse it", round, pl.Node, pl.Card.UUID, d.Pod, d.Where)
				}
			}
		}
	}
}
