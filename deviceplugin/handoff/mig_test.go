package handoff_test

import (
	"crypto/ed25519"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/assignkeys"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// migNode is a node of two H100s in MIG mode and one plain card:
// card 0 holds a 3g.40gb and a 1g.10gb, card 1 a 3g.40gb.
type migNode struct {
	m              *nvmlfake.Machine
	big0, small0   string // MIG devices of card 0
	big1           string // of card 1
	bigMiB, smaMiB int64
}

func newMIGNode(t *testing.T) migNode {
	t.Helper()
	h100 := nvmlfake.H100SXM5x80GB()
	m := nvmlfake.NewMachine([]nvmlfake.CardSpec{
		{Name: h100.Name, MemoryMiB: h100.MemoryMiB, SMs: h100.SMs, MIG: true, MIGModel: &h100},
		{Name: h100.Name, MemoryMiB: h100.MemoryMiB, SMs: h100.SMs, MIG: true, MIGModel: &h100},
		{Name: h100.Name, MemoryMiB: h100.MemoryMiB, SMs: h100.SMs},
	})
	n := migNode{m: m}
	var err error
	for _, c := range []struct {
		card    int
		profile string
		start   int
		uuid    *string
	}{{0, "3g.40gb", 4, &n.big0}, {0, "1g.10gb", 0, &n.small0}, {1, "3g.40gb", 0, &n.big1}} {
		if *c.uuid, err = m.CreateMIGDevice(c.card, c.profile, c.start); err != nil {
			t.Fatal(err)
		}
	}
	big, _ := h100.ProfileByName("3g.40gb")
	small, _ := h100.ProfileByName("1g.10gb")
	n.bigMiB, n.smaMiB = int64(big.MemoryMiB), int64(small.MemoryMiB)
	return n
}

func migCard(parent, mig string, mem int64) api.CardAssignment {
	return api.CardAssignment{UUID: parent, MemoryMiB: mem, Cores: 100, MIG: mig}
}

// migPod is a one-container pod asking for whole MIG instances of profile, as the
// scheduler places it: the count only, the profile in its annotation.
func migPod(name, profile string, cards ...api.CardAssignment) *corev1.Pod {
	p := pod(name, ctr{"main", cards})
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		api.ResourceNumber: *resource.NewQuantity(int64(len(cards)), resource.DecimalSI)}
	p.Annotations[api.AnnotationMIGProfile] = profile
	return p
}

func TestWholeMIGInstancesAreHandedOutAsTheirOwnDevices(t *testing.T) {
	n := newMIGNode(t)
	// One share per card: card 0 still offers a slot for each of its two instances.
	h := newHarness(t, n.m, 1)
	h.waitRegistered(1)
	pods := []struct {
		p    *corev1.Pod
		want expect
	}{
		{migPod("big-on-0", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB)), expect{n.big0, strconv.FormatInt(n.bigMiB, 10), "100"}},
		{migPod("small-on-0", "1g.10gb", migCard(h.uuids[0], n.small0, n.smaMiB)), expect{n.small0, strconv.FormatInt(n.smaMiB, 10), "100"}},
		{migPod("big-on-1", "3g.40gb", migCard(h.uuids[1], n.big1, n.bigMiB)), expect{n.big1, strconv.FormatInt(n.bigMiB, 10), "100"}},
	}
	for _, c := range pods {
		h.bind(c.p)
		resps, err := h.kubelet.Admit(h.ctx, c.p)
		if err != nil {
			t.Fatalf("%s: %v", c.p.Name, err)
		}
		checkResponse(t, c.p.Name, resps["main"], c.want)
		if err := h.kubelet.StartContainers(h.ctx, c.p); err != nil {
			t.Fatalf("%s: %v", c.p.Name, err)
		}
		h.waitHandoff(c.p, api.HandoffDone)
		if got := h.limitsFile(c.p, "main"); got != limitsFor(c.want) {
			t.Errorf("%s: limits file\n%s\nwant\n%s", c.p.Name, got, limitsFor(c.want))
		}
		rec, err := h.store.ReadRecord(string(c.p.UID), "main")
		if err != nil || len(rec.Cards) != 1 || rec.Cards[0].MIG != c.want.uuids {
			t.Errorf("%s: record %+v (%v), want the MIG device kept beside its card", c.p.Name, rec, err)
		}
	}
}

func TestAMIGAssignmentTheNodeCannotHonourIsRefused(t *testing.T) {
	n := newMIGNode(t)
	tests := []struct {
		name string
		pod  func(h *harness) *corev1.Pod
		want string
	}{
		{"an instance of another card than the one named is refused",
			func(h *harness) *corev1.Pod { return migPod("p", "3g.40gb", migCard(h.uuids[0], n.big1, n.bigMiB)) },
			"MIG device " + n.big1 + " is not an instance of card "},
		{"a MIG device on no card of the node is refused",
			func(h *harness) *corev1.Pod {
				return migPod("p", "3g.40gb", migCard(h.uuids[0], "MIG-00000000-0000-4000-8000-0000000000ff", n.bigMiB))
			},
			"MIG device MIG-00000000-0000-4000-8000-0000000000ff is not an instance of card "},
		{"a share of a card in MIG mode is refused",
			func(h *harness) *corev1.Pod {
				return pod("p", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
			},
			"is in MIG mode and is handed out only as whole MIG instances"},
		{"an instance on a card not in MIG mode is refused",
			func(h *harness) *corev1.Pod { return migPod("p", "3g.40gb", migCard(h.uuids[2], n.big0, n.bigMiB)) },
			"which is not in MIG mode"},
		{"an instance of another profile than the pod asks for is refused",
			func(h *harness) *corev1.Pod { return migPod("p", "1g.10gb", migCard(h.uuids[0], n.big0, n.bigMiB)) },
			"is a 3g.40gb instance, the pod asks for 1g.10gb"},
		{"more memory than the instance has is refused",
			func(h *harness) *corev1.Pod { return migPod("p", "1g.10gb", migCard(h.uuids[0], n.small0, n.smaMiB+1)) },
			"the assignment gives " + strconv.FormatInt(n.smaMiB+1, 10) + " MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, n.m, 2)
			h.waitRegistered(1)
			p := tt.pod(h)
			h.bind(p)
			_, err := h.kubelet.Admit(h.ctx, p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("admit: err = %v, want a refusal containing %q", err, tt.want)
			}
			ann := h.waitHandoff(p, api.HandoffFailed)
			if !strings.Contains(ann[api.AnnotationHandoffMessage], tt.want) {
				t.Errorf("handoff message %q, want it to say %q", ann[api.AnnotationHandoffMessage], tt.want)
			}
			if h.refusals("mig") != 1 {
				t.Errorf("refusals %v, want one counted as mig", h.refused)
			}
		})
	}
}

func TestAMIGInstanceGoesToOneLivePodAtATime(t *testing.T) {
	n := newMIGNode(t)
	h := newHarness(t, n.m, 4)
	h.waitRegistered(1)
	first := migPod("first", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB))
	h.bind(first)
	if _, err := h.kubelet.Admit(h.ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := h.kubelet.StartContainers(h.ctx, first); err != nil {
		t.Fatal(err)
	}
	// A scheduler that lost track gives the same instance to a second pod.
	second := migPod("second", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB))
	h.bind(second)
	_, err := h.kubelet.Admit(h.ctx, second)
	want := "MIG device " + n.big0 + " on card " + h.uuids[0] + ` is already given to team/first container "main"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second pod: err = %v, want %q", err, want)
	}
	h.kubelet.Release(second.UID) // the kubelet fails a pod whose admission failed

	// Once the first pod has finished, its instance goes to the next pod.
	cur, err := h.client.CoreV1().Pods("team").Get(h.ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Phase = corev1.PodSucceeded
	if _, err := h.client.CoreV1().Pods("team").UpdateStatus(h.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.kubelet.Release(first.UID)
	deadline := time.Now().Add(5 * time.Second)
	for got, _ := h.pods.Get("team", "first"); got == nil || got.Status.Phase != corev1.PodSucceeded; got, _ = h.pods.Get("team", "first") {
		if time.Now().After(deadline) {
			t.Fatal("the informer never showed the first pod finished")
		}
		time.Sleep(10 * time.Millisecond)
	}
	third := migPod("third", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB))
	h.bind(third)
	resps, err := h.kubelet.Admit(h.ctx, third)
	if err != nil {
		t.Fatalf("third pod after the first finished: %v", err)
	}
	checkResponse(t, "third", resps["main"], expect{n.big0, strconv.FormatInt(n.bigMiB, 10), "100"})
}

// The agent checks an instance against the card as NVML lists it when the container
// starts, not as it was when the agent started: an instance destroyed in between (an
// administrator's nvidia-smi) is refused, with the card's instances named.
func TestAMIGInstanceDestroyedBeforeTheContainerStartsIsRefused(t *testing.T) {
	n := newMIGNode(t)
	h := newHarness(t, n.m, 2)
	h.waitRegistered(1)
	h.migLayout = func(parent string) ([]api.MIGInstance, error) {
		for i, d := range n.m.Devices {
			if n.m.UUID(i) == parent {
				devs, err := discovery.ReadMIGDevices(d, parent, uint64(nvmlfake.H100SXM5x80GB().MemoryMiB))
				out := make([]api.MIGInstance, len(devs))
				for k, m := range devs {
					out[k] = m.MIGInstance
				}
				return out, err
			}
		}
		return nil, nil
	}
	h.restartAgent()
	p := migPod("p", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB))
	h.bind(p)
	if _, err := h.kubelet.Admit(h.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := n.m.DestroyMIGDevice(n.big0); err != nil {
		t.Fatal(err)
	}
	err := h.kubelet.StartContainers(h.ctx, p)
	want := "MIG device " + n.big0 + " is not an instance of card " + h.uuids[0] + " on node node-a now; the card's instances: [" + n.small0 + " (1g.10gb)]"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start: err = %v, want %q", err, want)
	}
	ann := h.waitHandoff(p, api.HandoffFailed)
	if !strings.Contains(ann[api.AnnotationHandoffMessage], "is not an instance of card") {
		t.Errorf("handoff message %q", ann[api.AnnotationHandoffMessage])
	}
}

// A tenant who can write its own pod's annotations cannot reach a MIG device the
// scheduler gave someone else: the MIG UUID is part of what the scheduler signs, for one
// pod UID and node.
func TestATenantCannotTakeAMIGDeviceItWasNotAssigned(t *testing.T) {
	n := newMIGNode(t)
	key := newKey(t)
	h := newHarnessWith(t, n.m, 2, signedTrust(key))
	h.waitRegistered(1)
	victim := sign(migPod("victim", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB)), key)
	h.bind(victim)
	for _, tt := range []struct {
		name, want string
		forge      func() *corev1.Pod
	}{
		{"its own signed assignment with the victim's MIG device written in is refused", "did not sign", func() *corev1.Pod {
			p := sign(migPod("forged-edit", "3g.40gb", migCard(h.uuids[1], n.big1, n.bigMiB)), key)
			a := strings.Replace(p.Annotations[api.AnnotationAssignment], n.big1, n.big0, 1)
			p.Annotations[api.AnnotationAssignment] = strings.Replace(a, h.uuids[1], h.uuids[0], 1)
			return p
		}},
		{"the victim's assignment and signature copied onto its pod are refused", "did not sign this pod's assignment", func() *corev1.Pod {
			p := migPod("forged-copy", "3g.40gb", migCard(h.uuids[0], n.big0, n.bigMiB))
			p.Annotations[api.AnnotationAssignment] = victim.Annotations[api.AnnotationAssignment]
			p.Annotations[api.AnnotationAssignmentSignature] = victim.Annotations[api.AnnotationAssignmentSignature]
			return p
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.forge()
			h.bind(p)
			if _, err := h.kubelet.Admit(h.ctx, p); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("forged pod: err = %v, want %q", err, tt.want)
			}
			h.kubelet.Release(p.UID)
		})
	}
	resps, err := h.kubelet.Admit(h.ctx, victim)
	if err != nil {
		t.Fatalf("the victim after the forgeries: %v", err)
	}
	checkResponse(t, "victim", resps["main"], expect{n.big0, strconv.FormatInt(n.bigMiB, 10), "100"})
}

func signedTrust(key api.SigningKey) *nodepods.Trust {
	v := api.NewVerifier([]ed25519.PublicKey{key.Private.Public().(ed25519.PublicKey)})
	return &nodepods.Trust{Keys: assignkeys.Static{V: v}}
}
