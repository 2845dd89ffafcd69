package vgpu

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
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
