package placement

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
		if round%2 == 1 {
			// Half the rounds on nodes with random links and NUMA nodes, so the
			// topology search and the NUMA rules are held to the same invariants.
			inv, _, _ := randomInventory(rng, len(cards))
			n.topo = newTopology(inv)
			for i := range n.Cards {
				n.Cards[i].NUMA = inv.Cards[i].NUMA
			}
		}
		type held struct {
			cs []api.ContainerAssignment
			t  Tenancy
		}
		var live []held
		for step := 0; step < 100; step++ {
			if len(live) > 0 && rng.Intn(3) == 0 {
				k := rng.Intn(len(live))
				if errs := n.Release(live[k].cs, live[k].t); len(errs) > 0 {
					t.Fatalf("round %d: release of a live assignment failed: %v", round, errs)
				}
				live = append(live[:k], live[k+1:]...)
			} else {
				r := randomRequest(rng, len(cards))
				if rng.Intn(4) == 0 {
					r.CardPolicy = api.PolicyIdleOnly
				}
				f, ferr := FitPod(n, r)
				if ferr != nil {
					continue
				}
				checkIdleOnly(t, n, r, f)
				if err := n.Reserve(f.Containers, r.Tenancy()); err != nil {
					t.Fatalf("round %d: FitPod chose %v but Reserve refused: %v", round, f.Containers, err)
				}
				checkChoice(t, n, r, f)
				live = append(live, held{f.Containers, r.Tenancy()})
			}
			checkInvariants(t, n)
		}
		for _, a := range live {
			n.Release(a.cs, a.t)
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
	p := []api.Policy{api.PolicyBinpack, api.PolicySpread, api.PolicyTopology}[rng.Intn(3)]
	o := api.PodOptions{QoS: qosClasses[rng.Intn(3)], NUMABind: rng.Intn(4) == 0}
	return &Request{Containers: cs, CardPolicy: p, NodePolicy: p, Options: o, TopologyWeight: 1}
}

// checkChoice holds a placement to the hard rules: a bound container's cards share
// one known NUMA node, and no shared card mixes QoS classes.
func checkChoice(t *testing.T, n *Node, r *Request, f *Fit) {
	t.Helper()
	for _, c := range f.Containers {
		numa := n.Card(c.Cards[0].UUID).NUMA
		for _, a := range c.Cards {
			if r.Options.NUMABind && len(c.Cards) > 1 && (numa < 0 || n.Card(a.UUID).NUMA != numa) {
				t.Fatalf("numa-bind container %s spans NUMA nodes: %v", c.Name, c.Cards)
			}
		}
	}
	for _, c := range n.Cards {
		kinds := 0
		for _, k := range c.Used.Classes {
			if k > 0 {
				kinds++
			}
		}
		if kinds > 1 {
			t.Fatalf("card %s mixes QoS classes: %v", c.UUID, c.Used.Classes)
		}
	}
}

// checkIdleOnly holds a placement, before it is booked, to the idle-only rule both
// ways: an idle-only pod gets only cards nothing is booked on, and no pod gets a card
// an idle-only pod holds.
func checkIdleOnly(t *testing.T, n *Node, r *Request, f *Fit) {
	t.Helper()
	for _, c := range f.Containers {
		for _, a := range c.Cards {
			used := n.Card(a.UUID).Used
			if used.IdleOnly > 0 || r.CardPolicy == api.PolicyIdleOnly && used.Tenants > 0 {
				t.Fatalf("%s pod placed on card %s, which holds %+v", r.CardPolicy, a.UUID, used)
			}
		}
	}
}

func checkInvariants(t *testing.T, n *Node) {
	t.Helper()
	for _, c := range n.Cards {
		if c.Used.MemoryMiB < 0 || c.Used.Cores < 0 || c.Used.Tenants < 0 || c.Used.IdleOnly < 0 || c.Used.IdleOnly > int32(c.Used.Tenants) {
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
	if err := n.Reserve(a, Tenancy{QoS: api.QoSFixedShare}); err == nil {
		t.Fatal("Reserve accepted an assignment that over-commits GPU-b")
	}
	if n.Cards[0].Used != (Usage{}) {
		t.Fatalf("a refused Reserve changed GPU-a: %+v", n.Cards[0].Used)
	}
	if errs := n.Release(a, Tenancy{QoS: api.QoSFixedShare}); len(errs) == 0 || n.Cards[0].Used.MemoryMiB != 0 {
		t.Fatalf("releasing what was never reserved must clamp at zero and report it; errs=%v used=%+v", errs, n.Cards[0].Used)
	}
}
