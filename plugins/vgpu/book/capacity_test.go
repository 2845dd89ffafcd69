package book

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// A pod pinned to a card that went unhealthy is refused by every node; the reason it
// gets must come from the node holding that card, whatever order the nodes are in.
func TestNeverFitsReportsTheNodeThePodAimsAt(t *testing.T) {
	for run := 0; run < 20; run++ {
		l := NewLedger()
		l.AddNode(testNode("gpu-a", "A100", 8, -1))
		l.AddNode(testNode("gpu-c", "A30", 4, 1))
		l.AddNode(testNode("gpu-d", "L40S", 4, -1))
		req := &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: 1, MemoryPercent: 10, Cores: 10}},
			Options: api.PodOptions{UUIDInclude: []string{"GPU-gpu-c-1"}}}
		why, _ := l.NeverFits(req)
		if !strings.Contains(why, "1 unhealthy") || !strings.Contains(why, "0 of 4 fit") {
			t.Fatalf("run %d: reason %q does not come from gpu-c", run, why)
		}
	}
}

// A container below every card's CUDA context reserve fits no node even idle: the
// job is refused with the reserve's reason, and the pending metric counts it by name.
func TestNeverFitsNamesTheContextReserve(t *testing.T) {
	l := NewLedger()
	n := testNode("gpu-h", "NVIDIA H100 80GB HBM3", 4, -1)
	for i := range n.Cards {
		n.Cards[i].ContextReserveMiB = 518
	}
	l.AddNode(n)
	req := &placement.Request{Containers: []api.ContainerRequest{{Name: "train", Cards: 1, MemoryMiB: 256, Cores: 10}}}
	why, category := l.NeverFits(req)
	const want = `vgpu: container "train" asks 256Mi of vGPU memory; cards on this node need at least 518Mi for a CUDA context (contextReserve)`
	if why != want {
		t.Errorf("reason %q\nwant %q", why, want)
	}
	if category != string(placement.ReasonContextReserve) {
		t.Errorf("pending category %q, want %q", category, placement.ReasonContextReserve)
	}
	req.Containers[0].MemoryMiB = 518
	if why, _ := l.NeverFits(req); why != "" {
		t.Errorf("a request at the reserve never fits: %s", why)
	}
}

// What an idle-only pod leaves free on its card is free to nobody: the gang checks'
// free capacity leaves the card out, while the total keeps it.
func TestACardHeldIdleOnlyHasNothingFree(t *testing.T) {
	l := NewLedger()
	n := testNode("n1", "A100", 2, -1)
	a := []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-n1-0", MemoryMiB: 1000, Cores: 10}}}}
	if errs := n.Account(a, placement.Tenancy{QoS: api.QoSFixedShare, IdleOnly: true}); len(errs) > 0 {
		t.Fatal(errs)
	}
	l.AddNode(n)
	free, _ := l.Free()
	total, _ := l.Total()
	if free.MemoryMiB != 24576 || free.Cores != 100 || free.Slots != 10 || total.MemoryMiB != 2*24576 {
		t.Fatalf("free %+v, total %+v; want one whole card free of two", free, total)
	}
}

// Cards in MIG mode add the compute slices of the instances their layouts hold to the
// queue shares' MIG supply and nothing to card memory or cores; an unhealthy or
// cordoned MIG card, or one on a cordoned node, adds nothing, as for other cards.
func TestCardTotalsCountMIGSlices(t *testing.T) {
	l := NewLedger()
	a, b, c := migNode("a", "3g.40gb", "2g.20gb"), migNode("b"), migNode("c", "7g.80gb")
	for _, n := range []*placement.Node{a, b, c} {
		l.AddNode(n)
	}
	total, mean := l.CardTotals()
	if total.MIGSlices != 12 || total.MemoryMiB != 3*81559 || total.Cores != 300 || mean != 81559 {
		t.Fatalf("totals %+v, mean %d; want 12 MIG slices (3g + 2g, none, 7g) beside the plain cards", total, mean)
	}
	a.Cards[0].Cordon = &api.CardCordon{Reason: "fan"}
	b.Cards[0].Healthy = false
	l.MarkCordoned("c")
	if total, _ := l.CardTotals(); total.MIGSlices != 0 {
		t.Fatalf("cordoned and unhealthy MIG cards add %v slices, want none", total.MIGSlices)
	}
}
