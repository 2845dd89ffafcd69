package handoff_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func TestAPodWithoutAUsableAssignmentIsRefusedAndOthersAreUnaffected(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(p *corev1.Pod)
		want  string
	}{
		{"a pod without any assignment annotation is refused naming both keys",
			func(p *corev1.Pod) { delete(p.Annotations, api.AnnotationAssignment) },
			"neither " + api.AnnotationAssignment + " nor " + api.VolcanoAssignedIDs},
		{"a pod whose assignment is not JSON is refused naming the annotation",
			func(p *corev1.Pod) { p.Annotations[api.AnnotationAssignment] = "{not json" },
			"invalid: " + api.AnnotationAssignment},
		{"a pod whose assignment names another node is refused",
			func(p *corev1.Pod) {
				p.Annotations[api.AnnotationAssignment] = strings.Replace(p.Annotations[api.AnnotationAssignment], `"node":"node-a"`, `"node":"node-b"`, 1)
			},
			`names node "node-b"`},
		{"a pod whose assignment gives its container fewer cards than it requests is refused",
			func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Limits[api.ResourceNumber] = *resource.NewQuantity(2, resource.DecimalSI)
			},
			`container "main" gets 1 cards, requests 2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nvmlfake.Cards(4), 4)
			h.waitRegistered(1)
			bad := pod("bad", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
			tt.spoil(bad)
			good, want := h.podOnCards("good", []ctrCard{{0, 2000, 20}})
			h.bind(bad)
			h.bind(good.Pod)
			_, err := h.kubelet.Admit(h.ctx, bad)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "team/bad") {
				t.Fatalf("admit bad pod: err = %v, want a refusal naming team/bad and %q", err, tt.want)
			}
			resps, err := h.kubelet.Admit(h.ctx, good.Pod)
			if err != nil {
				t.Fatalf("the good pod after the bad one: %v", err)
			}
			checkResponse(t, "good", resps["main"], want)
			if err := h.kubelet.StartContainers(h.ctx, good.Pod); err != nil {
				t.Fatal(err)
			}
			h.waitHandoff(good.Pod, api.HandoffDone)
		})
	}
}

func TestSlotsTheKubeletChoseAgainstThePreferenceAreRefused(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(4), 2)
	h.waitRegistered(1)
	h.kubelet.SetIgnorePreferred(true) // the kubelet takes the first free slots: card 0
	p := pod("steered", ctr{"main", []api.CardAssignment{card(h.uuids[3], 1000, 10)}})
	h.bind(p)
	_, err := h.kubelet.Admit(h.ctx, p)
	if err == nil || !strings.Contains(err.Error(), "no pending container on this node matches: cards "+h.uuids[0]) ||
		!strings.Contains(err.Error(), `team/steered container "main" (cards `+h.uuids[3]+")") {
		t.Fatalf("err = %v, want a refusal naming the kubelet's card and the waiting container", err)
	}
}

func TestTwoSlotsOfOneCardForOneContainerAreRefused(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(2), 4)
	h.waitRegistered(1)
	h.kubelet.SetIgnorePreferred(true) // first two free slots: both on card 0
	p := pod("twice", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10), card(h.uuids[1], 1000, 10)}})
	h.bind(p)
	if _, err := h.kubelet.Admit(h.ctx, p); err == nil || !strings.Contains(err.Error(), "one container got two slots of the same card") {
		t.Fatalf("err = %v, want the same-card refusal", err)
	}
}

func TestAnAgentRestartInTheMiddleOfAHandoffLosesNothingAndDoubleAssignsNothing(t *testing.T) {
	h := newHarness(t, nvmlfake.FourCardsTwoNUMA(), 4)
	h.waitRegistered(1)
	u := h.uuids
	first := pod("first", ctr{"a", []api.CardAssignment{card(u[1], 4000, 40)}}, ctr{"b", []api.CardAssignment{card(u[1], 5000, 50)}})
	h.bind(first)
	if _, err := h.kubelet.Admit(h.ctx, first); err != nil {
		t.Fatal(err)
	}
	h.restartAgent() // Allocate done, PreStartContainer not yet: the handoff is pending

	second := pod("second", ctr{"main", []api.CardAssignment{card(u[1], 6000, 10)}})
	h.bind(second)
	resps, err := h.kubelet.Admit(h.ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "second", resps["main"], expect{u[1], "6000", "10"})
	for _, p := range []*corev1.Pod{first, second} {
		if err := h.kubelet.StartContainers(h.ctx, p); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		h.waitHandoff(p, api.HandoffDone)
	}
	for _, c := range []struct {
		p         *corev1.Pod
		container string
		mem       string
	}{{first, "a", "4000"}, {first, "b", "5000"}, {second, "main", "6000"}} {
		if got := h.limitsFile(c.p, c.container); !strings.Contains(got, api.EnvMemoryLimitMiB+"="+c.mem+"\n") {
			t.Errorf("%s/%s limits file:\n%s\nwant memory %s", c.p.Name, c.container, got, c.mem)
		}
	}
	seen := map[string]bool{}
	for _, ids := range [][]string{h.kubelet.Devices(first, "a"), h.kubelet.Devices(first, "b"), h.kubelet.Devices(second, "main")} {
		for _, id := range ids {
			if seen[id] {
				t.Errorf("slot %s handed out twice", id)
			}
			seen[id] = true
		}
	}
}

func TestACardThatFailsAfterTheKubeletChoseItsSlotsIsRefusedAtAllocate(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(2), 4)
	h.waitRegistered(1)
	u := h.uuids
	// The kubelet offered card 0's slots and the plugin preferred them; the card reports
	// a fatal XID before the kubelet's Allocate.
	h.kubelet.BeforeAllocate(func() { h.reg.SetHealth(u[0], false, "fatal XID 79") })
	late, _ := h.podOnCards("late", []ctrCard{{0, 1000, 10}})
	h.bind(late.Pod)
	_, err := h.kubelet.Admit(h.ctx, late.Pod)
	want := "unhealthy card: " + u[0] + " (fatal XID 79) turned unhealthy after the kubelet chose its slots"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want a refusal containing %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(h.root, "pods", string(late.UID))); !os.IsNotExist(err) {
		t.Errorf("a directory was prepared for the refused container: %v", err)
	}

	// Healthy again and offered again, the card is handed out.
	h.kubelet.BeforeAllocate(nil)
	h.reg.SetHealth(u[0], true, "")
	if err := h.kubelet.WaitFor(h.ctx, func(k *kubeletsim.Kubelet) bool {
		return k.Health()[cards.SlotID(u[0], 0)] == pluginapi.Healthy
	}); err != nil {
		t.Fatal(err)
	}
	h.kubelet.Release(late.UID)
	again, want2 := h.podOnCards("again", []ctrCard{{0, 1000, 10}})
	h.bind(again.Pod)
	resps, err := h.kubelet.Admit(h.ctx, again.Pod)
	if err != nil {
		t.Fatalf("admit on the healed card: %v", err)
	}
	checkResponse(t, "again", resps["main"], want2)
}

func TestAPodWhoseCardIsUnhealthyIsRefusedNamingTheCardAndWhy(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(2), 4)
	h.waitRegistered(1)
	u := h.uuids
	h.reg.SetHealth(u[0], false, "fatal XID 79")
	if err := h.kubelet.WaitFor(h.ctx, func(k *kubeletsim.Kubelet) bool {
		return k.Health()[cards.SlotID(u[0], 0)] == pluginapi.Unhealthy
	}); err != nil {
		t.Fatal(err)
	}
	// Bound to card 0 before the scheduler saw it fail: the kubelet offers only card 1's
	// slots, and the refusal of them says why the pod's own card was not offered.
	p, _ := h.podOnCards("pinned", []ctrCard{{0, 1000, 10}})
	h.bind(p.Pod)
	_, err := h.kubelet.Admit(h.ctx, p.Pod)
	want := `waiting containers: [team/pinned container "main" (cards ` + u[0] + ") (" + u[0] + " unhealthy: fatal XID 79)]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want a refusal containing %q", err, want)
	}
}
