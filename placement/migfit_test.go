package placement

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

// migProfileMiB are the instance sizes the tests use (H100 80GB).
var migProfileMiB = map[string]int64{"1g.10gb": 9856, "2g.20gb": 20096, "3g.40gb": 40320, "7g.80gb": 80896}

// migCard is a healthy H100 in MIG mode with one instance per profile given, in that
// order; its MIG UUIDs are MIG-<card>-<n>.
func migCard(uuid string, numa int, profiles ...string) api.Card {
	c := api.Card{UUID: uuid, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, NUMA: numa, Shares: 10, Healthy: true,
		MIG: true, MIGInstances: []api.MIGInstance{}}
	start := 0
	for i, p := range profiles {
		size := int(p[0] - '0')
		c.MIGInstances = append(c.MIGInstances, api.MIGInstance{UUID: fmt.Sprintf("MIG-%s-%d", uuid, i), Profile: p, GI: i,
			Start: start, Size: size, MemoryMiB: migProfileMiB[p]})
		start += size
	}
	return c
}

func migRequest(profile string, policy api.Policy, cards ...int) *Request {
	r := &Request{CardPolicy: policy, NodePolicy: api.PolicyBinpack, Options: api.PodOptions{MIGProfile: profile}}
	for i, k := range cards {
		r.Containers = append(r.Containers, api.ContainerRequest{Name: fmt.Sprintf("c%d", i), Cards: k, MemoryPercent: 100,
			Cores: 100, MIGProfile: profile})
	}
	return r
}

// migsOf lists the MIG UUIDs of a fit, container by container.
func migsOf(f *Fit) []string {
	var out []string
	for _, c := range f.Containers {
		for _, a := range c.Cards {
			out = append(out, a.MIG)
		}
	}
	return out
}

func TestFitMIG(t *testing.T) {
	holdAll := func(n *Node, migs ...string) {
		t.Helper()
		for _, m := range migs {
			c := n.Card(strings.TrimPrefix(m[:strings.LastIndexByte(m, '-')], "MIG-")) // MIG-<card>-<n>
			if errs := n.Account([]api.ContainerAssignment{{Name: "x", Cards: []api.CardAssignment{{UUID: c.UUID,
				MemoryMiB: 1, Cores: 100, MIG: m}}}}, Tenancy{}); len(errs) > 0 {
				t.Fatal(errs)
			}
		}
	}
	cases := []struct {
		name   string
		cards  []api.Card
		held   []string
		req    *Request
		want   []string // MIG UUIDs chosen, or nil for a refusal
		reason string   // a substring of the refusal
	}{
		{name: "a MIG pod takes a free instance of exactly its profile",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb", "3g.40gb")},
			req:   migRequest("3g.40gb", api.PolicyBinpack, 1), want: []string{"MIG-GPU-a-1"}},
		{name: "a pod without a profile still refuses a card in MIG mode",
			cards:  []api.Card{migCard("GPU-a", 0, "7g.80gb")},
			req:    &Request{Containers: []api.ContainerRequest{{Name: "c", Cards: 1, MemoryPercent: 10}}},
			reason: "1 " + string(ReasonMIG)},
		{name: "a MIG pod refuses a card that is not in MIG mode",
			cards:  []api.Card{{UUID: "GPU-a", MemoryMiB: 81559, Shares: 10, Healthy: true}},
			req:    migRequest("1g.10gb", api.PolicyBinpack, 1),
			reason: `no free MIG instance of profile 1g.10gb for container "c0" (needs 1; 0 taken on the node); cards: 1 not in MIG mode`},
		{name: "a card without the profile is refused with the profiles it has",
			cards:  []api.Card{migCard("GPU-a", 0, "1g.10gb", "1g.10gb", "3g.40gb")},
			req:    migRequest("2g.20gb", api.PolicyBinpack, 1),
			reason: "1 no MIG instance of the profile"},
		{name: "taken instances are not handed out again, and the refusal counts them",
			cards:  []api.Card{migCard("GPU-a", 0, "3g.40gb", "3g.40gb")},
			held:   []string{"MIG-GPU-a-0", "MIG-GPU-a-1"},
			req:    migRequest("3g.40gb", api.PolicyBinpack, 1),
			reason: "no free MIG instance of profile 3g.40gb for container \"c0\" (needs 1; 2 taken on the node); cards: 1 no free MIG instance of the profile"},
		{name: "a container takes several instances, and a second container the next ones",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb", "1g.10gb", "1g.10gb")},
			req:   migRequest("1g.10gb", api.PolicyBinpack, 2, 1), want: []string{"MIG-GPU-a-0", "MIG-GPU-a-1", "MIG-GPU-a-2"}},
		{name: "too few instances in all is refused with the counts",
			cards:  []api.Card{migCard("GPU-a", 0, "1g.10gb", "1g.10gb"), migCard("GPU-b", 0, "1g.10gb")},
			held:   []string{"MIG-GPU-b-0"},
			req:    migRequest("1g.10gb", api.PolicyBinpack, 3),
			reason: `container "c0" needs 3 MIG instances of profile 1g.10gb, 2 free and 1 taken on the node; cards: 1 no free MIG instance`},
		{name: "binpack takes the instance on the card with the most taken instances",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb", "1g.10gb"), migCard("GPU-b", 0, "1g.10gb", "1g.10gb", "2g.20gb")},
			held:  []string{"MIG-GPU-b-2"},
			req:   migRequest("1g.10gb", api.PolicyBinpack, 1), want: []string{"MIG-GPU-b-0"}},
		{name: "spread takes the instance on the card with the fewest taken instances",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb", "1g.10gb"), migCard("GPU-b", 0, "1g.10gb", "1g.10gb")},
			held:  []string{"MIG-GPU-a-0"},
			req:   migRequest("1g.10gb", api.PolicySpread, 2), want: []string{"MIG-GPU-b-0", "MIG-GPU-a-1"}},
		{name: "a UUID filter applies to the parent card",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb"), migCard("GPU-b", 0, "1g.10gb")},
			req: func() *Request {
				r := migRequest("1g.10gb", api.PolicyBinpack, 1)
				r.Options.UUIDExclude = []string{"GPU-a"}
				return r
			}(), want: []string{"MIG-GPU-b-0"}},
		{name: "a type filter applies to the parent card",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb")},
			req: func() *Request {
				r := migRequest("1g.10gb", api.PolicyBinpack, 1)
				r.Options.TypeInclude = []string{"a100"}
				return r
			}(), reason: "1 excluded by GPU type annotation"},
		{name: "a card in MIG mode whose layout is unknown hands out nothing",
			cards: []api.Card{func() api.Card {
				c := migCard("GPU-a", 0)
				c.MIGInstances = nil
				return c
			}()},
			req: migRequest("1g.10gb", api.PolicyBinpack, 1), reason: "1 MIG layout unknown"},
		{name: "unhealthy and cordoned cards in MIG mode are refused as before",
			cards: []api.Card{func() api.Card { c := migCard("GPU-a", 0, "1g.10gb"); c.Healthy = false; return c }(),
				func() api.Card {
					c := migCard("GPU-b", 0, "1g.10gb")
					c.Cordon = &api.CardCordon{Reason: "ECC"}
					return c
				}()},
			req: migRequest("1g.10gb", api.PolicyBinpack, 1), reason: "1 cordoned, 1 unhealthy"},
		{name: "idle-only takes only cards none of whose instances is taken",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb", "1g.10gb"), migCard("GPU-b", 0, "1g.10gb", "1g.10gb")},
			held:  []string{"MIG-GPU-a-0"},
			req:   migRequest("1g.10gb", api.PolicyIdleOnly, 1), want: []string{"MIG-GPU-b-0"}},
		{name: "numa-bind takes all of a container's instances from one NUMA node",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb"), migCard("GPU-b", 1, "1g.10gb", "1g.10gb")},
			req: func() *Request {
				r := migRequest("1g.10gb", api.PolicyBinpack, 2)
				r.Options.NUMABind = true
				return r
			}(), want: []string{"MIG-GPU-b-0", "MIG-GPU-b-1"}},
		{name: "numa-bind refuses instances spread over NUMA nodes",
			cards: []api.Card{migCard("GPU-a", 0, "1g.10gb"), migCard("GPU-b", 1, "1g.10gb")},
			req: func() *Request {
				r := migRequest("1g.10gb", api.PolicyBinpack, 2)
				r.Options.NUMABind = true
				return r
			}(), reason: "2 are free but not on one node (node 0: 1, node 1: 1)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := testNode(tc.cards...)
			holdAll(n, tc.held...)
			f, ferr := FitPod(n, tc.req)
			if tc.want == nil {
				if ferr == nil {
					t.Fatalf("fit %v, want a refusal", migsOf(f))
				}
				if !strings.Contains(ferr.Error(), tc.reason) {
					t.Fatalf("refusal %q does not say %q", ferr.Error(), tc.reason)
				}
				if _, serr := ScorePod(n, tc.req); serr == nil || serr.Error() != ferr.Error() {
					t.Fatalf("ScorePod says %v, FitPod %v", serr, ferr)
				}
				return
			}
			if ferr != nil {
				t.Fatalf("refused: %s", ferr.Detail())
			}
			if got := migsOf(f); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("took %v, want %v", got, tc.want)
			}
			for _, c := range f.Containers {
				for _, a := range c.Cards {
					card := n.Card(a.UUID)
					in := card.MIGInstances[migInstance(card, a.MIG)]
					if a.Cores != 100 || a.MemoryMiB != in.MemoryMiB || in.Profile != tc.req.Options.MIGProfile {
						t.Fatalf("assignment %+v for instance %+v", a, in)
					}
				}
			}
			if err := n.Reserve(f.Containers, tc.req.Tenancy()); err != nil {
				t.Fatalf("reserving the fit: %v", err)
			}
		})
	}
}

func TestMIGRefusalsExplainEachCard(t *testing.T) {
	n := testNode(migCard("GPU-a", 0, "1g.10gb", "3g.40gb"), migCard("GPU-b", 0, "3g.40gb"))
	n.Account([]api.ContainerAssignment{{Name: "x", Cards: []api.CardAssignment{{UUID: "GPU-b", MemoryMiB: 1, Cores: 100, MIG: "MIG-GPU-b-0"}}}}, Tenancy{})
	_, ferr := FitPod(n, migRequest("1g.10gb", api.PolicyBinpack, 2))
	if ferr == nil {
		t.Fatal("fits")
	}
	got := ferr.Explained()
	if len(got) != 1 || got[0].Reason != ReasonMIGNoProfile || got[0].Detail != "the card's instances: 3g.40gb" {
		t.Fatalf("rejects %+v", got)
	}
	if ferr.Resolvable() {
		t.Error("a node with one 1g.10gb and no other to free is called resolvable")
	}
	_, ferr = FitPod(n, migRequest("3g.40gb", api.PolicyBinpack, 2))
	if ferr == nil || !ferr.Resolvable() || ferr.Dominant() != ReasonMIGTaken {
		t.Fatalf("two 3g.40gb, one taken: %v, resolvable %v", ferr, ferr != nil && ferr.Resolvable())
	}
}

// Booking by MIG UUID: Reserve refuses a taken or unknown instance and changes
// nothing; Release frees it; Account of a second holder says it is over-committed;
// a clone books apart from its original; the card's shared usage is never touched.
func TestMIGBookings(t *testing.T) {
	n := testNode(migCard("GPU-a", 0, "3g.40gb", "3g.40gb"), api.Card{UUID: "GPU-b", MemoryMiB: 40000, Healthy: true})
	one := func(mig string) []api.ContainerAssignment {
		return []api.ContainerAssignment{{Name: "c", Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 40320, Cores: 100, MIG: mig}}}}
	}
	if err := n.Reserve(one("MIG-GPU-a-0"), Tenancy{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Reserve(one("MIG-GPU-a-0"), Tenancy{}); err == nil || !strings.Contains(err.Error(), "is taken") {
		t.Fatalf("second reserve of one instance: %v", err)
	}
	if err := n.Reserve(one("MIG-GPU-z-9"), Tenancy{}); err == nil || !strings.Contains(err.Error(), "no MIG device") {
		t.Fatalf("reserve of an unknown instance: %v", err)
	}
	both := append(one("MIG-GPU-a-1"), one("MIG-GPU-a-1")[0])
	both[1].Name = "d"
	if err := n.Reserve(both, Tenancy{}); err == nil || n.MIGHolders("MIG-GPU-a-1") != 0 {
		t.Fatalf("one pod booking an instance twice: %v, holders %d", err, n.MIGHolders("MIG-GPU-a-1"))
	}
	if n.Cards[0].Used != (Usage{}) {
		t.Fatalf("MIG bookings touched the card's usage: %+v", n.Cards[0].Used)
	}
	c := n.Clone()
	if errs := c.Release(one("MIG-GPU-a-0"), Tenancy{}); len(errs) > 0 || c.MIGHolders("MIG-GPU-a-0") != 0 || n.MIGHolders("MIG-GPU-a-0") != 1 {
		t.Fatalf("release on a clone: %v; clone %d, original %d holders", errs, c.MIGHolders("MIG-GPU-a-0"), n.MIGHolders("MIG-GPU-a-0"))
	}
	if errs := c.Release(one("MIG-GPU-a-0"), Tenancy{}); len(errs) != 1 {
		t.Fatalf("releasing a free instance: %v", errs)
	}
	if errs := n.Account(one("MIG-GPU-a-0"), Tenancy{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "over-committed") {
		t.Fatalf("accounting a second holder: %v", errs)
	}
	n.Release(one("MIG-GPU-a-0"), Tenancy{})
	if n.MIGHolders("MIG-GPU-a-0") != 1 {
		t.Fatal("releasing one of two holders freed the instance")
	}
}

// Random pods asking for random profiles and counts on random MIG layouts, booked and
// released in random order: no MIG device ever has two holders; every instance
// handed out is of the pod's profile, on its card, with its memory; a refusal comes
// only when fewer instances of the profile are free than the container asks (single
// container pods, no filters); and releasing everything frees every instance.
func TestRandomMIGBookingsNeverShareAnInstance(t *testing.T) {
	rng := rand.New(rand.NewSource(35))
	profiles := []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}
	for round := 0; round < 300; round++ {
		var cards []api.Card
		for i := 0; i < 1+rng.Intn(4); i++ {
			var ps []string
			for left := 7; left > 0; {
				p := profiles[rng.Intn(len(profiles))]
				if int(p[0]-'0') > left {
					break
				}
				ps = append(ps, p)
				left -= int(p[0] - '0')
			}
			c := migCard(fmt.Sprintf("GPU-%d", i), rng.Intn(2), ps...)
			c.MIG = rng.Intn(6) > 0
			cards = append(cards, c)
		}
		n := testNode(cards...)
		policies := []api.Policy{api.PolicyBinpack, api.PolicySpread, api.PolicyTopology, api.PolicyIdleOnly}
		var live [][]api.ContainerAssignment
		holders := map[string]int{}
		for step := 0; step < 60; step++ {
			if len(live) > 0 && rng.Intn(3) == 0 {
				k := rng.Intn(len(live))
				if errs := n.Release(live[k], Tenancy{}); len(errs) > 0 {
					t.Fatalf("round %d: release: %v", round, errs)
				}
				for _, c := range live[k] {
					for _, a := range c.Cards {
						holders[a.MIG]--
					}
				}
				live = append(live[:k], live[k+1:]...)
				continue
			}
			profile := profiles[rng.Intn(len(profiles))]
			policy := policies[rng.Intn(len(policies))]
			k := 1 + rng.Intn(3)
			req := migRequest(profile, policy, k)
			free := 0
			for i := range n.Cards {
				c := &n.Cards[i]
				busy := false
				for _, in := range c.MIGInstances {
					busy = busy || holders[in.UUID] > 0
				}
				for _, in := range c.MIGInstances {
					if c.MIG && in.Profile == profile && holders[in.UUID] == 0 && !(policy == api.PolicyIdleOnly && busy) {
						free++
					}
				}
			}
			f, ferr := FitPod(n, req)
			if (ferr == nil) != (free >= k) {
				t.Fatalf("round %d step %d: %d of %s free for %d: fit %v, refusal %v", round, step, free, profile, k, f != nil, ferr)
			}
			if ferr != nil {
				continue
			}
			for _, c := range f.Containers {
				for _, a := range c.Cards {
					card := n.Card(a.UUID)
					i := migInstance(card, a.MIG)
					if i < 0 || !card.MIG || card.MIGInstances[i].Profile != profile || card.MIGInstances[i].MemoryMiB != a.MemoryMiB {
						t.Fatalf("round %d: handed out %+v from card %+v", round, a, card.Card)
					}
					holders[a.MIG]++
					if holders[a.MIG] > 1 {
						t.Fatalf("round %d: %s handed out twice", round, a.MIG)
					}
				}
			}
			if err := n.Reserve(f.Containers, req.Tenancy()); err != nil {
				t.Fatalf("round %d: reserving a fit: %v", round, err)
			}
			live = append(live, f.Containers)
		}
		for _, cs := range live {
			if errs := n.Release(cs, Tenancy{}); len(errs) > 0 {
				t.Fatal(errs)
			}
		}
		if len(n.mig) != 0 {
			t.Fatalf("round %d: instances still held after releasing everything: %v", round, n.mig)
		}
		for i := range n.Cards {
			if n.Cards[i].Used != (Usage{}) {
				t.Fatalf("round %d: MIG bookings left usage on card %d: %+v", round, i, n.Cards[i].Used)
			}
		}
	}
}
