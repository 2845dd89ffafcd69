package inventory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// The MIG layout discovery reads is published in its own annotation, beside an
// inventory that keeps the previous release's shape; a node with no MIG card has the
// annotation removed, so a stale layout cannot outlive MIG mode.
func TestThePublisherWritesTheMIGLayoutBesideTheInventory(t *testing.T) {
	m := nvmlfake.MIGCards(nvmlfake.A100SXM4x40GB())
	d := m.Devices[0]
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 0, Size: 8})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	res, err := discovery.Discover(m, discovery.Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	p := New(client, cards.NewRegistry(res.Cards(), res.Links), Options{Node: "node-a", Heartbeat: time.Minute}, nil)
	if err := p.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	ann := nodeAnnotations(t, client)
	layout, err := api.DecodeMIGInstances(ann[api.AnnotationMIGInstances])
	if err != nil {
		t.Fatalf("%s: %v", api.AnnotationMIGInstances, err)
	}
	got := layout.Cards[m.UUID(0)]
	if len(got) != 1 || got[0].Profile != "7g.40gb" || got[0].Size != 8 || got[0].UUID != m.MIGInstances(0)[0].UUID {
		t.Fatalf("published layout %+v", layout.Cards)
	}
	if strings.Contains(ann[api.AnnotationInventory], "MIG-") {
		t.Errorf("the inventory carries MIG devices: %s", ann[api.AnnotationInventory])
	}
	inv, err := api.DecodeInventory(ann[api.AnnotationInventory])
	if err != nil || !inv.Cards[0].MIG {
		t.Fatalf("inventory %+v (%v)", inv, err)
	}

	none := New(client, registry(t, 2), Options{Node: "node-a", Heartbeat: time.Minute}, nil)
	if err := none.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, ok := nodeAnnotations(t, client)[api.AnnotationMIGInstances]; ok {
		t.Errorf("with no MIG card the node keeps %s=%s, want it removed", api.AnnotationMIGInstances, v)
	}
}

// A MIG layout the codec refuses (here a MIG UUID in the slash form older drivers
// report) is left off; the inventory of the cards is still published.
func TestABadMIGLayoutDoesNotKeepTheCardsOffTheNode(t *testing.T) {
	res, err := discovery.Discover(nvmlfake.Cards(1), discovery.Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	found := res.Cards()
	found[0].MIG = true
	found[0].MIGInstances = []api.MIGInstance{{UUID: "MIG-GPU-1/1/0", Profile: "7g.40gb", GI: 1, Size: 8, MemoryMiB: 40192}}
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	p := New(client, cards.NewRegistry(found, res.Links), Options{Node: "node-a", Heartbeat: time.Minute}, nil)
	if err := p.Publish(context.Background()); err != nil {
		t.Fatalf("a bad MIG layout failed the publish: %v", err)
	}
	ann := nodeAnnotations(t, client)
	if _, ok := ann[api.AnnotationMIGInstances]; ok {
		t.Errorf("the unencodable layout was written: %s", ann[api.AnnotationMIGInstances])
	}
	if inv, err := api.DecodeInventory(ann[api.AnnotationInventory]); err != nil || !inv.Cards[0].MIG {
		t.Fatalf("inventory %+v (%v)", inv, err)
	}
}
