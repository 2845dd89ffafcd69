package agent

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// planScene is a node agent's MIG plan applier on a fake H100 whose card 0 holds two
// 3g.40gb (slices 0-3 and 4-7), with sharesPerCard 1, and a fake API server holding
// the node with a plan for card.
type planScene struct {
	m       *nvmlfake.Machine
	reg     *cards.Registry
	client  *fake.Clientset
	plans   *migPlans
	changes <-chan struct{}
}

func newPlanScene(t *testing.T, card string, profiles ...string) *planScene {
	t.Helper()
	m := nvmlfake.MIGCards(nvmlfake.H100SXM5x80GB())
	for _, start := range []int{0, 4} {
		if _, err := m.CreateMIGDevice(0, "3g.40gb", start); err != nil {
			t.Fatal(err)
		}
	}
	res, err := discovery.Discover(m, discovery.Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := cards.NewRegistry(res.Cards(), res.Links)
	devices := map[string]nvml.Device{}
	for _, d := range res.Devices {
		devices[d.Card.UUID] = d.Handle
	}
	if card == "" {
		card = m.UUID(0)
	}
	plan, err := api.EncodeMIGPlan(&api.MIGPlan{ID: "p1", Card: card, Profiles: profiles, Created: "2026-01-02T15:04:05Z"})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
		Annotations: map[string]string{api.AnnotationMIGPlan: plan}}})
	changes, cancel := reg.Subscribe()
	t.Cleanup(cancel)
	s := &planScene{m: m, reg: reg, client: client, changes: changes,
		plans: newMIGPlans(client, "n", devices, reg, 1, prometheus.NewRegistry())}
	s.plans.backoff = time.Millisecond
	return s
}

// run runs the applier until the node carries an answer, and returns it with the
// node's published MIG layout of card 0.
func (s *planScene) run(t *testing.T) (*api.MIGPlanStatus, []api.MIGInstance) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.plans.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n, err := s.client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Annotations[api.AnnotationMIGPlanStatus]
		if !ok {
			continue
		}
		st, err := api.DecodeMIGPlanStatus(v)
		if err != nil {
			t.Fatal(err)
		}
		layout, err := api.DecodeMIGInstances(n.Annotations[api.AnnotationMIGInstances])
		if err != nil {
			t.Fatalf("the answer came without a readable layout: %v", err)
		}
		// A second look at the node (the answer's own update) must not apply it again.
		time.Sleep(50 * time.Millisecond)
		return st, layout.Cards[s.m.UUID(0)]
	}
	t.Fatal("no answer on the node")
	return nil, nil
}

func profilesOf(t *testing.T, m *nvmlfake.Machine) []string {
	t.Helper()
	var out []string
	for _, in := range m.MIGInstances(0) {
		out = append(out, in.Profile)
	}
	slices.Sort(out)
	return out
}

func uuids(in []api.MIGInstance) []string {
	var out []string
	for _, i := range in {
		out = append(out, i.UUID)
	}
	slices.Sort(out)
	return out
}

func nvmlUUIDs(m *nvmlfake.Machine) []string {
	var out []string
	for _, in := range m.MIGInstances(0) {
		out = append(out, in.UUID)
	}
	slices.Sort(out)
	return out
}

// The plan is applied: the card holds the new profiles (the 3g.40gb that could stay
// is kept), the answer and the new layout arrive in one write, the card offers a slot
// per instance and the kubelet server is told, and the plan is applied once.
func TestTheAgentAppliesAPlanAndPublishesTheLayout(t *testing.T) {
	s := newPlanScene(t, "", "3g.40gb", "2g.20gb", "1g.10gb")
	kept := s.m.MIGInstances(0)[0].UUID
	before, _ := s.reg.Card(s.m.UUID(0))
	st, layout := s.run(t)
	if st.ID != "p1" || st.Outcome != api.MIGPlanApplied || st.Card != s.m.UUID(0) {
		t.Fatalf("answer %+v, want p1 applied", st)
	}
	if got := profilesOf(t, s.m); !reflect.DeepEqual(got, []string{"1g.10gb", "2g.20gb", "3g.40gb"}) {
		t.Fatalf("card holds %v", got)
	}
	if !slices.Contains(nvmlUUIDs(s.m), kept) {
		t.Error("the 3g.40gb the plan could keep was recreated")
	}
	if !reflect.DeepEqual(uuids(layout), nvmlUUIDs(s.m)) {
		t.Fatalf("published %v, NVML has %v", uuids(layout), nvmlUUIDs(s.m))
	}
	// The card offered a slot for every instance its profile table allows from the
	// start (seven 1g.10gb), so the plan neither adds nor takes slots away.
	if c, _ := s.reg.Card(s.m.UUID(0)); before.Shares != 7 || c.Shares != before.Shares {
		t.Errorf("card offers %d slots after the plan, %d before; want 7 throughout", c.Shares, before.Shares)
	}
	select {
	case <-s.changes:
	default:
		t.Error("the registry's subscribers (the kubelet server, the publisher) were not told")
	}
	if n := testutil.ToFloat64(s.plans.outcomes.WithLabelValues(api.MIGPlanApplied)); n != 1 {
		t.Errorf("applied counted %v times, want once", n)
	}
}

// A card with a process on one of its instances is refused and left as it was.
func TestTheAgentRefusesABusyCardAndLeavesItUntouched(t *testing.T) {
	s := newPlanScene(t, "", "7g.80gb")
	before := s.m.MIGInstances(0)
	s.m.SetMIGProcesses(before[1].UUID, []nvml.ProcessInfo{{Pid: 4242}})
	st, layout := s.run(t)
	if st.Outcome != api.MIGPlanRefusedBusy || !strings.Contains(st.Message, "4242") {
		t.Fatalf("answer %+v, want refused-busy naming the process", st)
	}
	if got := s.m.MIGInstances(0); !reflect.DeepEqual(got, before) {
		t.Fatalf("the busy card changed: %v, was %v", got, before)
	}
	if !reflect.DeepEqual(uuids(layout), nvmlUUIDs(s.m)) {
		t.Fatalf("published %v, NVML has %v", uuids(layout), nvmlUUIDs(s.m))
	}
	if n := testutil.ToFloat64(s.plans.outcomes.WithLabelValues(api.MIGPlanRefusedBusy)); n != 1 {
		t.Errorf("refused-busy counted %v times", n)
	}
}

// A step that fails is rolled back: the card ends with its previous profiles, the
// answer says so, and the layout published is NVML's (a recreated instance has a
// new MIG UUID).
func TestTheAgentReportsAFailedPlanRolledBack(t *testing.T) {
	s := newPlanScene(t, "", "3g.40gb", "2g.20gb", "1g.10gb")
	s.m.InjectMIGFault(0, nvmlfake.MIGFault{Op: nvmlfake.OpCreateComputeInstance, Ret: nvml.ERROR_INSUFFICIENT_RESOURCES})
	st, layout := s.run(t)
	if st.Outcome != api.MIGPlanFailedRolledBack || !strings.Contains(st.Message, "restored") {
		t.Fatalf("answer %+v, want failed-rolled-back", st)
	}
	if got := profilesOf(t, s.m); !reflect.DeepEqual(got, []string{"3g.40gb", "3g.40gb"}) {
		t.Fatalf("card holds %v after the rollback, want its two 3g.40gb", got)
	}
	if !reflect.DeepEqual(uuids(layout), nvmlUUIDs(s.m)) {
		t.Fatalf("published %v, NVML has %v", uuids(layout), nvmlUUIDs(s.m))
	}
}

// A plan for a card the node does not have, or a layout the card cannot hold, is
// refused without touching anything.
func TestTheAgentRefusesAPlanItCannotCarryOut(t *testing.T) {
	for name, s := range map[string]*planScene{
		"another node's card":         newPlanScene(t, "GPU-elsewhere", "7g.80gb"),
		"more than the card can hold": newPlanScene(t, "", "7g.80gb", "1g.10gb"),
	} {
		t.Run(name, func(t *testing.T) {
			before := s.m.MIGInstances(0)
			st, _ := s.run(t)
			if st.Outcome != api.MIGPlanRefusedInvalid || st.Message == "" {
				t.Fatalf("answer %+v, want refused-invalid with a reason", st)
			}
			if got := s.m.MIGInstances(0); !reflect.DeepEqual(got, before) {
				t.Fatalf("the card changed: %v, was %v", got, before)
			}
		})
	}
}
