package handoff_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/assignkeys"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// The attacks below are a tenant's: it may create and update pods in its namespace
// (and so write any annotation), nothing more. Each must be refused by the agent alone,
// as on a cluster whose admission policy is missing, and must not disturb a pod the
// scheduler placed.

func newKey(t testing.TB) api.SigningKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewSigningKey(priv)
}

// signedHarness runs an agent that verifies against the scheduler's key.
func signedHarness(t *testing.T, allowUnsigned bool) (*harness, api.SigningKey) {
	t.Helper()
	key := newKey(t)
	v := api.NewVerifier([]ed25519.PublicKey{key.Private.Public().(ed25519.PublicKey)})
	h := newHarnessWith(t, nvmlfake.Cards(4), 4, &nodepods.Trust{Keys: assignkeys.Static{V: v}, AllowUnsigned: allowUnsigned})
	h.waitRegistered(1)
	return h, key
}

func sign(p *corev1.Pod, key api.SigningKey) *corev1.Pod {
	p.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(p, node)
	return p
}

func TestTenantForgedAssignmentsAreRefusedAndTheSchedulersPodIsServed(t *testing.T) {
	tests := []struct {
		name   string
		forge  func(h *harness, key api.SigningKey, victim *corev1.Pod) *corev1.Pod
		reason string
		want   string
	}{
		{"an unsigned assignment on a pod created with its node set is refused",
			func(h *harness, _ api.SigningKey, _ *corev1.Pod) *corev1.Pod {
				return pod("forged", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
			}, "unsigned", "assignment is not signed"},
		{"an assignment signed with the tenant's own key is refused",
			func(h *harness, _ api.SigningKey, _ *corev1.Pod) *corev1.Pod {
				return sign(pod("forged", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}}), newKey(t))
			}, "unknown_key", "unknown key"},
		{"the scheduler's signature copied from another pod with the same cards is refused",
			func(h *harness, _ api.SigningKey, victim *corev1.Pod) *corev1.Pod {
				p := pod("forged", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
				p.Annotations[api.AnnotationAssignment] = victim.Annotations[api.AnnotationAssignment]
				p.Annotations[api.AnnotationAssignmentSignature] = victim.Annotations[api.AnnotationAssignmentSignature]
				return p
			}, "bad_signature", "did not sign this pod's assignment"},
		{"a signed assignment whose cores the tenant raised is refused",
			func(h *harness, key api.SigningKey, _ *corev1.Pod) *corev1.Pod {
				p := sign(pod("forged", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}}), key)
				p.Annotations[api.AnnotationAssignment] = strings.Replace(p.Annotations[api.AnnotationAssignment], `"cores":10`, `"cores":100`, 1)
				return p
			}, "bad_signature", "did not sign"},
		{"a Volcano card list with memory 0 (no limit) and no signature is refused",
			func(h *harness, _ api.SigningKey, _ *corev1.Pod) *corev1.Pod {
				p := pod("forged", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
				delete(p.Annotations, api.AnnotationAssignment)
				p.Annotations[api.VolcanoAssignedIDs] = h.uuids[0] + ",NVIDIA,0,0:"
				return p
			}, "unsigned", "not signed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, key := signedHarness(t, false)
			victim, want := h.podOnCards("victim", []ctrCard{{0, 2000, 20}})
			sign(victim.Pod, key)
			forged := tt.forge(h, key, victim.Pod)
			h.bind(forged)
			h.bind(victim.Pod)
			_, err := h.kubelet.Admit(h.ctx, forged)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "team/forged") {
				t.Fatalf("admit the forged pod: err = %v, want a refusal naming team/forged and %q", err, tt.want)
			}
			if got := h.refusals(tt.reason); got == 0 {
				t.Errorf("refusals[%s] = 0, want it counted (%v)", tt.reason, h.refused)
			}
			resps, err := h.kubelet.Admit(h.ctx, victim.Pod)
			if err != nil {
				t.Fatalf("the scheduler's pod after the forged one: %v", err)
			}
			checkResponse(t, "victim", resps["main"], want)
		})
	}
}

func TestASignedAssignmentBeyondTheRequestIsRefused(t *testing.T) {
	h, key := signedHarness(t, false)
	p := pod("greedy", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
	p.Spec.Containers[0].Resources.Limits[api.ResourceMemory] = *resource.NewQuantity(500, resource.DecimalSI)
	sign(p, key)
	h.bind(p)
	_, err := h.kubelet.Admit(h.ctx, p)
	if err == nil || !strings.Contains(err.Error(), "memory 1000 MiB, requests 500 MiB") {
		t.Fatalf("err = %v, want the memory cap named", err)
	}
	if h.refusals("exceeds_request") == 0 {
		t.Errorf("refusals = %v, want exceeds_request counted", h.refused)
	}
}

func TestUnsignedAllowedWhileMigratingButABadSignatureNeverIs(t *testing.T) {
	h, _ := signedHarness(t, true)
	unsigned, want := h.podOnCards("from-deviceshare", []ctrCard{{1, 2000, 20}})
	h.bind(unsigned.Pod)
	resps, err := h.kubelet.Admit(h.ctx, unsigned.Pod)
	if err != nil {
		t.Fatalf("an unsigned pod within its request while unsigned assignments are allowed: %v", err)
	}
	checkResponse(t, "from-deviceshare", resps["main"], want)

	bad := sign(pod("bad", ctr{"main", []api.CardAssignment{card(h.uuids[2], 1000, 10)}}), newKey(t))
	h.bind(bad)
	if _, err := h.kubelet.Admit(h.ctx, bad); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("err = %v, want a pod signed with another key refused even so", err)
	}
}

// A tenant patches its running pod's assignment (its own, so it can): the container's
// next start gets what Allocate recorded or nothing, never the patched limits.
func TestAnAssignmentPatchedAfterAllocateIsRefusedAtTheNextStart(t *testing.T) {
	h, key := signedHarness(t, false)
	p, _ := h.podOnCards("patched", []ctrCard{{0, 2000, 20}})
	sign(p.Pod, key)
	h.bind(p.Pod)
	if _, err := h.kubelet.Admit(h.ctx, p.Pod); err != nil {
		t.Fatal(err)
	}
	if err := h.kubelet.StartContainers(h.ctx, p.Pod); err != nil {
		t.Fatal(err)
	}
	before := h.limitsFile(p.Pod, "main")

	cur, err := h.client.CoreV1().Pods(p.Namespace).Get(h.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raised := strings.Replace(cur.Annotations[api.AnnotationAssignment], `"memoryMiB":2000`, `"memoryMiB":80000`, 1)
	raised = strings.Replace(raised, `"qos":"fixed-share"`, `"qos":"best-effort"`, 1)
	cur.Annotations[api.AnnotationAssignment] = raised
	if _, err := h.client.CoreV1().Pods(p.Namespace).Update(h.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if got, ok := h.pods.Get(p.Namespace, p.Name); ok && got.Annotations[api.AnnotationAssignment] == raised {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never showed the patched pod")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = h.kubelet.StartContainers(h.ctx, p.Pod) // the container restarts
	if err == nil || !strings.Contains(err.Error(), "changed after the container was allocated") || !strings.Contains(err.Error(), "80000 MiB") {
		t.Fatalf("restart after the patch: err = %v, want a refusal naming the change", err)
	}
	if after := h.limitsFile(p.Pod, "main"); after != before {
		t.Fatalf("limits file changed after a refused restart:\n%s\nwas\n%s", after, before)
	}
	if h.refusals("changed") == 0 {
		t.Errorf("refusals = %v, want changed counted", h.refused)
	}
}
