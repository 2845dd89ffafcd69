package book

import (
	"fmt"
	"math"
	"strings"
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// migNode is a node of one H100 in MIG mode holding the profiles given, and one
// ordinary card; its MIG UUIDs are MIG-<node>-<n>.
func migNode(name string, profiles ...string) *placement.Node {
	mig := api.Card{UUID: "GPU-" + name + "-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, NUMA: -1,
		Shares: 10, Healthy: true, MIG: true, MIGInstances: []api.MIGInstance{}}
	for i, p := range profiles {
		mig.MIGInstances = append(mig.MIGInstances, api.MIGInstance{UUID: fmt.Sprintf("MIG-%s-%d", name, i), Profile: p,
			GI: i, Start: i, Size: 1, MemoryMiB: 20096})
	}
	plain := api.Card{UUID: "GPU-" + name + "-1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, NUMA: -1,
		Shares: 10, Healthy: true}
	return placement.NewNode(name, &api.NodeInventory{Version: "v1", Cards: []api.Card{mig, plain}}, 1)
}

func migReq(profile string, k int) *placement.Request {
	return &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: k, MemoryPercent: 100, Cores: 100,
		MIGProfile: profile}}, Options: api.PodOptions{MIGProfile: profile}, CardPolicy: api.PolicyBinpack, NodePolicy: api.PolicyBinpack}
}

// The ledger books MIG instances by UUID: a booked instance is not booked again in
// the session, a release frees it, the assignment names the MIG device with the
// instance's memory, and the shared card beside it is untouched.
func TestTheLedgerBooksAndFreesMIGInstances(t *testing.T) {
	l := NewLedger()
	l.AddNode(migNode("n1", "2g.20gb", "2g.20gb"))
	req := migReq("2g.20gb", 1)
	var got []string
	for i := 0; i < 2; i++ {
		cs, err := l.Book(vapi.TaskID(fmt.Sprint("t", i)), "n1", req, nil)
		if err != nil {
			t.Fatal(err)
		}
		a := cs[0].Cards[0]
		if a.UUID != "GPU-n1-0" || a.MemoryMiB != 20096 || a.Cores != 100 || a.MIG == "" {
			t.Fatalf("assignment %+v", a)
		}
		got = append(got, a.MIG)
	}
	if got[0] == got[1] {
		t.Fatalf("one instance booked twice: %v", got)
	}
	_, err := l.Book("t2", "n1", req, nil)
	if err == nil || !strings.Contains(err.Error(), "no free MIG instance of profile 2g.20gb") {
		t.Fatalf("third booking: %v", err)
	}
	if why, _ := l.NeverFits(req); why != "" {
		t.Fatalf("a request that fits the idle node is called one that never fits: %s", why)
	}
	if why, _ := l.NeverFits(migReq("2g.20gb", 3)); !strings.Contains(why, "needs 3 MIG instances of profile 2g.20gb, 2 free") {
		t.Fatalf("three of two instances: %q", why)
	}
	l.Release("t0")
	cs, err := l.Book("t2", "n1", req, nil)
	if err != nil || cs[0].Cards[0].MIG != got[0] {
		t.Fatalf("after a release: %+v, %v; want %s again", cs, err, got[0])
	}
	plain := l.Clone("n1").Cards[1]
	if plain.Used != (placement.Usage{}) {
		t.Fatalf("MIG bookings touched the shared card: %+v", plain.Used)
	}
}

// The queue shares' supply leaves out cards in MIG mode; a MIG request takes nothing
// from the shared cards that enqueue's gang checks sum.
func TestMIGCapacity(t *testing.T) {
	l := NewLedger()
	l.AddNode(migNode("n1", "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))
	total, mean := l.CardTotals()
	if total.MemoryMiB != 81559 || math.Abs(total.Cores-100) > 1e-9 || mean != 81559 {
		t.Fatalf("totals %+v, mean %d; want 81559 MiB, 100 cores, mean 81559", total, mean)
	}
	if d := taskDemand(migReq("1g.10gb", 4), 81559); d != (Demand{}) {
		t.Fatalf("a MIG request's bound on shared cards is %+v", d)
	}
}
