package inventory

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func registry(t testing.TB, n int) *cards.Registry {
	t.Helper()
	res, err := discovery.Discover(nvmlfake.Cards(n), discovery.Options{Shares: 10})
	if err != nil {
		t.Fatal(err)
	}
	return cards.NewRegistry(res.Cards(), res.Links)
}

func nodeAnnotations(t *testing.T, c *fake.Clientset) map[string]string {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestThePublisherWritesOnChangeAndOnHeartbeatAndRetriesFailures(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	var fail atomic.Int32
	fail.Store(2)
	var patches atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		if fail.Add(-1) >= 0 {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	reg := registry(t, 4)
	p := New(client, reg, Options{Node: "node-a", Heartbeat: 100 * time.Millisecond, VolcanoCompat: true,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	t.Run("two failed writes are retried until the inventory lands", func(t *testing.T) {
		waitFor(t, "inventory", func() bool { return nodeAnnotations(t, client)[api.AnnotationInventory] != "" })
		ann := nodeAnnotations(t, client)
		inv, err := api.DecodeInventory(ann[api.AnnotationInventory])
		if err != nil || len(inv.Cards) != 4 {
			t.Fatalf("inventory %v, %v", inv, err)
		}
		if _, err := time.Parse(time.RFC3339, ann[api.AnnotationHeartbeat]); err != nil {
			t.Errorf("heartbeat %q: %v", ann[api.AnnotationHeartbeat], err)
		}
		vc, err := api.DecodeVolcanoNodeRegister(ann[api.VolcanoNodeRegister])
		if err != nil || len(vc) != 4 || vc[0].Count != 10 {
			t.Errorf("volcano register %v, %v", vc, err)
		}
		if got := ann[api.VolcanoNodeHandshake]; len(got) < 9 || got[:9] != "Reported_" {
			t.Errorf("handshake %q", got)
		}
	})
	t.Run("a health change is published without waiting for the heartbeat", func(t *testing.T) {
		uuid := reg.Inventory().Cards[1].UUID
		reg.SetHealth(uuid, false, "test")
		waitFor(t, "unhealthy card in the inventory", func() bool {
			inv, err := api.DecodeInventory(nodeAnnotations(t, client)[api.AnnotationInventory])
			return err == nil && !inv.Cards[1].Healthy
		})
	})
	t.Run("the heartbeat keeps writing while nothing changes", func(t *testing.T) {
		before := patches.Load()
		time.Sleep(350 * time.Millisecond)
		if got := patches.Load() - before; got < 2 {
			t.Errorf("%d writes in 350ms with a 100ms heartbeat", got)
		}
	})
}

// Each card's CUDA context reserve is written in its own annotation, in the same patch
// as the inventory, which stays what a scheduler of the previous release decodes; with
// no reserve on any card (contextReserve 0) the annotation is removed, so a stale one
// from an earlier configuration cannot keep containers off the cards.
func TestThePublisherWritesTheReservesBesideTheInventory(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Annotations: map[string]string{api.AnnotationContextReserve: `{"version":"v1","cards":{"GPU-stale":900}}`}}})
	var patches []string
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
		return false, nil, nil
	})
	res, err := discovery.Discover(nvmlfake.Cards(2), discovery.Options{Shares: 10})
	if err != nil {
		t.Fatal(err)
	}
	found := res.Cards()
	found[0].ContextReserveMiB = 518
	p := New(client, cards.NewRegistry(found, res.Links), Options{Node: "node-a", Heartbeat: time.Minute}, nil)
	if err := p.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	ann := nodeAnnotations(t, client)
	r, err := api.DecodeContextReserve(ann[api.AnnotationContextReserve])
	if err != nil || len(r.Cards) != 1 || r.Cards[found[0].UUID] != 518 {
		t.Errorf("reserves %+v (%v), want only %s's 518 MiB", r, err, found[0].UUID)
	}
	if strings.Contains(ann[api.AnnotationInventory], "eserve") {
		t.Errorf("the inventory carries the reserve: %s", ann[api.AnnotationInventory])
	}
	if len(patches) != 1 || !strings.Contains(patches[0], api.AnnotationInventory) || !strings.Contains(patches[0], api.AnnotationContextReserve) {
		t.Errorf("patches %q, want one carrying both the inventory and the reserves", patches)
	}

	none := New(client, registry(t, 2), Options{Node: "node-a", Heartbeat: time.Minute}, nil)
	if err := none.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, ok := nodeAnnotations(t, client)[api.AnnotationContextReserve]; ok {
		t.Errorf("with no reserve on any card the node keeps %s=%s, want it removed", api.AnnotationContextReserve, v)
	}
}
