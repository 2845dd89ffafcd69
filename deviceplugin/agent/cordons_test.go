package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// A pod that Tessera's scheduler did not place reaches the kubelet with no assignment.
// The agent reads the Node's card cordons from its own inventory writes, so the
// kubelet is steered off the cordoned NVLinked pair (cards 0 and 1) to the other one;
// Allocate then refuses the pod all the same, naming the cards the kubelet chose: no
// container without an assignment is ever handed a card.
func TestTheAgentSteersAPodItDidNotPlaceOffCordonedCardsAndStillRefusesIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, cfg := agentOnFakeKubelet(t, "--shares-per-card=2")
	machine := nvmlfake.FourCardsTwoNUMA()
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cordons, err := api.EncodeCordons(&api.NodeCordons{Cards: map[string]api.CardCordon{
		machine.UUID(0): {Reason: "ECC errors", Since: since}, machine.UUID(1): {Reason: "ECC errors", Since: since}}})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Annotations: map[string]string{api.AnnotationCordonedCards: cordons}}})
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{NVML: machine, Client: client}) }()
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatalf("no registration: %v", err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unplaced", Namespace: "ns", UID: "unplaced-uid"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{api.ResourceNumber: resource.MustParse("2")}}}}}}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet may ask before the agent's first inventory write returned the Node;
	// until then the agent prefers nothing for such a pod, and the kubelet asks again.
	var refusal error
	for {
		_, refusal = k.Admit(ctx, p)
		k.Release(p.UID)
		if refusal == nil || !strings.Contains(refusal.Error(), "not read yet") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the agent never read the node's cordons: %v", refusal)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refusal == nil {
		t.Fatal("a pod without an assignment was admitted")
	}
	msg := refusal.Error()
	want := "no pending container on this node matches: cards " + machine.UUID(2) + "," + machine.UUID(3)
	if !strings.Contains(msg, "allocate failed") || !strings.Contains(msg, want) {
		t.Fatalf("refusal %q; want Allocate to refuse the uncordoned pair (%q)", msg, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
