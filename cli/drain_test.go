package cli

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tessera-gpu/tessera/api"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// drainScene is cluster() with a UID on every pod, a second pod sharing card 0 of
// gpu-a, and a CPU-only pod bound to gpu-a.
func drainScene(t *testing.T) []runtime.Object {
	objs := cluster(t)
	share := placed(t, vgpuPod("team-a", "train-1", "research", 1, 5000, 20), "gpu-a", api.QoSFixedShare, api.HandoffDone,
		api.CardAssignment{UUID: "GPU-a0", MemoryMiB: 5000, Cores: 20})
	cpu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "gpu-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	objs = append(objs, share, cpu)
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.UID = types.UID("uid-" + p.Name)
		}
	}
	return objs
}

// evictions answers every eviction with answer (nil: the pod is deleted, as the API
// server does once no PodDisruptionBudget objects) and records each request.
func evictions(client *fake.Clientset, answer func(n int) error) *[]*policyv1.Eviction {
	var got []*policyv1.Eviction
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		got = append(got, ev)
		if err := answer(len(got)); err != nil {
			return true, nil, err
		}
		return true, nil, client.Tracker().Delete(podsGVR, ev.Namespace, ev.Name)
	})
	return &got
}

func fastDrain(t *testing.T) {
	t.Helper()
	old := drainPoll
	drainPoll = 10 * time.Millisecond
	t.Cleanup(func() { drainPoll = old })
}

func pdbRefusal() error {
	return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
}

// drain cordons the card first, then evicts through the Eviction API exactly the
// pods holding it (the pod that has just left is not made again), and waits until
// they are gone; pods on other cards and CPU-only pods stay.
func TestDrainEvictsThePodsOfTheCardAndWaits(t *testing.T) {
	fastDrain(t)
	env, client, out, _ := cardEnv(t, drainScene(t)...)
	got := evictions(client, func(int) error { return nil })
	if err := runCard(t, env, "drain", "gpu-a", "0", "--reason", "RMA"); err != nil {
		t.Fatal(err)
	}
	if c := cordonsOn(t, client, "gpu-a"); c == nil || c.Cards["GPU-a0"].Reason != "RMA" {
		t.Errorf("card 0 not cordoned: %+v", c)
	}
	var evicted []string
	for _, ev := range *got {
		evicted = append(evicted, ev.Namespace+"/"+ev.Name)
		if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || *ev.DeleteOptions.Preconditions.UID != types.UID("uid-"+ev.Name) {
			t.Errorf("eviction of %s is not held to the pod's UID: %+v", ev.Name, ev.DeleteOptions)
		}
	}
	sort.Strings(evicted) // each pod is evicted on its own
	if strings.Join(evicted, " ") != "team-a/train-0 team-a/train-1" {
		t.Errorf("evicted %v, want the two pods of card 0", evicted)
	}
	for _, p := range []string{"team-b/infer-0", "team-a/web-1"} {
		ns, name, _ := strings.Cut(p, "/")
		if _, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s, not on card 0, is gone: %v", p, err)
		}
	}
	for _, want := range []string{"gpu-a: card 0 (GPU-a0) cordoned: RMA", "evicting team-a/train-0 (card 0 (GPU-a0))",
		"team-a/train-0 is gone", "gpu-a: card 0 drained: 2 pods gone"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("drain printed\n%s\nwant a line %q", out, want)
		}
	}
}

// A PodDisruptionBudget that refuses the eviction holds: drain retries until the
// timeout and fails naming the pod, which is still there; once the budget allows it,
// the drain completes.
func TestDrainRespectsPodDisruptionBudgets(t *testing.T) {
	fastDrain(t)
	env, client, out, _ := cardEnv(t, drainScene(t)...)
	got := evictions(client, func(int) error { return pdbRefusal() })
	err := runCard(t, env, "drain", "gpu-a", "GPU-a1", "--timeout", "100ms")
	if err == nil || !strings.Contains(err.Error(), "1 of 1 pods left on the cards: team-b/infer-0: not evicted, refused or told to retry later until the timeout: Cannot evict pod") {
		t.Fatalf("error %v, want a timeout naming team-b/infer-0", err)
	}
	if len(*got) < 2 {
		t.Errorf("%d eviction requests, want retries until the timeout", len(*got))
	}
	if _, err := client.CoreV1().Pods("team-b").Get(context.Background(), "infer-0", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod the budget protects is gone: %v", err)
	}
	if strings.Count(out.String(), "eviction refused for now") != 1 {
		t.Errorf("the refusal is not said once:\n%s", out)
	}

	env, client, out, _ = cardEnv(t, drainScene(t)...)
	evictions(client, func(n int) error {
		if n < 3 {
			return pdbRefusal()
		}
		return nil
	})
	if err := runCard(t, env, "drain", "gpu-a", "1"); err != nil {
		t.Fatalf("the budget let the third eviction through, and drain failed: %v\n%s", err, out)
	}
}

// An evicted pod that does not go (its node's kubelet is away) is waited for until the
// timeout; a pod the job controller made again under the same name counts as gone.
func TestDrainWaitsForThePodsToGo(t *testing.T) {
	fastDrain(t)
	env, client, _, _ := cardEnv(t, drainScene(t)...)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return a.GetSubresource() == "eviction", nil, nil // accepted, never deleted
	})
	err := runCard(t, env, "drain", "gpu-a", "1", "--timeout", "50ms")
	if err == nil || !strings.Contains(err.Error(), "team-b/infer-0: evicted, not gone by the timeout") {
		t.Fatalf("error %v, want the evicted pod named as not gone", err)
	}

	env, client, out, _ := cardEnv(t, drainScene(t)...)
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		again, _ := client.Tracker().Get(podsGVR, "team-b", "infer-0")
		p := again.(*corev1.Pod).DeepCopy()
		p.UID, p.Spec.NodeName = "uid-infer-0-again", ""
		return true, nil, client.Tracker().Update(podsGVR, p, "team-b")
	})
	if err := runCard(t, env, "drain", "gpu-a", "1", "--timeout", "1s"); err != nil || !strings.Contains(out.String(), "team-b/infer-0 is gone") {
		t.Fatalf("drain: %v\n%s", err, out)
	}
}

// --dry-run says what would be cordoned and evicted, and writes nothing.
func TestDrainDryRunChangesNothing(t *testing.T) {
	env, client, out, _ := cardEnv(t, drainScene(t)...)
	got := evictions(client, func(int) error { return nil })
	if err := runCard(t, env, "drain", "gpu-a", "0", "1", "--dry-run", "--reason", "RMA"); err != nil {
		t.Fatal(err)
	}
	if len(*got) != 0 || cordonsOn(t, client, "gpu-a") != nil {
		t.Errorf("a dry run evicted %d pods or cordoned %+v", len(*got), cordonsOn(t, client, "gpu-a"))
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" {
			t.Errorf("a dry run sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	for _, want := range []string{"(dry run) gpu-a: card 0 (GPU-a0) cordoned: RMA", "(dry run) would evict team-a/train-0 (card 0 (GPU-a0))",
		"(dry run) would evict team-b/infer-0 (card 1 (GPU-a1))", "(dry run) gpu-a: 3 pods hold card 0, 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run printed\n%s\nwant a line %q", out, want)
		}
	}
}

// The pods whose cards cannot be read are named and left alone; pods finished, on
// other nodes, or without vGPU requests are never victims.
func TestDrainVictimsAreThePodsHoldingTheCards(t *testing.T) {
	var pods []corev1.Pod
	for _, o := range drainScene(t) {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, *p)
		}
	}
	done := pods[0]
	done.Name, done.Status.Phase = "done-0", corev1.PodSucceeded
	broken := pods[0]
	broken.Name = "broken-0"
	broken.Annotations = map[string]string{api.AnnotationAssignment: "{"}
	pods = append(pods, done, broken)
	victims, unreadable := drainVictims(pods, "gpu-a", []api.Card{card("GPU-a0", 0, "A100", 1)}, api.DefaultResourceNames())
	var names []string
	for _, v := range victims {
		names = append(names, v.String())
	}
	if strings.Join(names, " ") != "team-a/train-0 team-a/train-1" {
		t.Errorf("victims %v", names)
	}
	if len(unreadable) != 1 || !strings.HasPrefix(unreadable[0], "team-a/broken-0: ") {
		t.Errorf("unreadable %v, want broken-0", unreadable)
	}
}
