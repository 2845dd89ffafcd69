package engine

import (
	"math/rand"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// No sequence of fits, reservations and releases may over-commit a card or drive its
// usage negative, and releasing everything returns every card to idle.
func TestRandomAllocationsNeverOvercommit(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < 200; round++ {
		cards := make([]api.Card, 1+rng.Intn(8))
		for i := range cards {
			cards[i] = api.Card{Healthy: rng.Intn(10) > 0, MemoryMiB: int64(8000 + rng.Intn(4)*8000), Shares: 1 + rng.Intn(6)}
		}
		n := testNode(cards...)
		var live [][]api.ContainerAssignment
		for step := 0; step < 100; step++ {
			if len(live) > 0 && rng.Intn(3) == 0 {
				k := rng.Intn(len(live))
				if errs := n.Release(live[k], api.QoSFixedShare); len(errs) > 0 {
					t.Fatalf("round %d: release of a live assignment failed: %v", round, errs)
				}
				live = append(live[:k], live[k+1:]...)
			} else {
				r := randomRequest(rng, len(cards))
				f, ferr := FitPod(n, r)
				if ferr != nil {
					continue
				}
				if err := n.Reserve(f.Containers, api.QoSFixedShare); err != nil {
					t.Fatalf("round %d: FitPod chose %v but Reserve refused: %v", round, f.Containers, err)
				}
				live = append(live, f.Containers)
			}
			checkInvariants(t, n)
		}
		for _, a := range live {
			n.Release(a, api.QoSFixedShare)
		}
		for _, c := range n.Cards {
			if c.Used != (Usage{}) {
				t.Fatalf("round %d: card %s not idle after releasing everything: %+v", round, c.UUID, c.Used)
			}
		}
	}
}

func randomRequest(rng *rand.Rand, maxCards int) *Request {
	cs := make([]api.ContainerRequest, 1+rng.Intn(2))
	for i := range cs {
		cs[i] = api.ContainerRequest{Name: string(rune('a' + i)), Cards: 1 + rng.Intn(maxCards), Cores: []int{0, 10, 25, 50, 100}[rng.Intn(5)]}
		if rng.Intn(2) == 0 {
			cs[i].MemoryMiB = int64(1 + rng.Intn(12000))
		} else {
			cs[i].MemoryPercent = 1 + rng.Intn(100)
		}
	}
	p := api.PolicyBinpack
	if rng.Intn(2) == 0 {
		p = api.PolicySpread
	}
	return &Request{Containers: cs, CardPolicy: p, NodePolicy: p}
}

func checkInvariants(t *testing.T, n *Node) {
	t.Helper()
	for _, c := range n.Cards {
		if c.Used.MemoryMiB < 0 || c.Used.Cores < 0 || c.Used.Tenants < 0 {
			t.Fatalf("card %s negative: %+v", c.UUID, c.Used)
		}
		if c.Used.MemoryMiB > c.CapacityMiB || c.Used.Cores > 100 || c.Used.Tenants > c.Shares {
			t.Fatalf("card %s over-committed: %+v (capacity %d MiB, shares %d)", c.UUID, c.Used, c.CapacityMiB, c.Shares)
		}
		if !c.Healthy && c.Used != (Usage{}) {
			t.Fatalf("unhealthy card %s was used: %+v", c.UUID, c.Used)
		}
	}
}

func TestReserveIsAllOrNothing(t *testing.T) {
	n := used(testNode(healthy(2)...), 1, 39500, 0, 1)
	a := []api.ContainerAssignment{{Name: "x", Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 1000}, {UUID: "GPU-b", MemoryMiB: 1000}}}}
	if err := n.Reserve(a, api.QoSFixedShare); err == nil {
		t.Fatal("Reserve accepted an assignment that over-commits GPU-b")
	}
	if n.Cards[0].Used != (Usage{}) {
		t.Fatalf("a refused Reserve changed GPU-a: %+v", n.Cards[0].Used)
	}
	if errs := n.Release(a, api.QoSFixedShare); len(errs) == 0 || n.Cards[0].Used.MemoryMiB != 0 {
		t.Fatalf("releasing what was never reserved must clamp at zero and report it; errs=%v used=%+v", errs, n.Cards[0].Used)
	}
}
