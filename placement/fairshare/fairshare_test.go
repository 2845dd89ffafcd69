package fairshare

import (
	"math"
	"math/rand"
	"testing"

	"github.com/tessera-gpu/tessera/api"
)

func claim(w, mem, cores float64) Claim {
	return Claim{Weight: w, Request: Amount{MemoryMiB: mem, Cores: cores}, Capability: Unlimited}
}

func guaranteed(c Claim, mem, cores float64) Claim {
	c.Guarantee = Amount{MemoryMiB: mem, Cores: cores}
	return c
}

func TestDivide(t *testing.T) {
	total := Amount{MemoryMiB: 1000, Cores: 400}
	tests := []struct {
		name   string
		claims []Claim
		want   []Amount
	}{
		{"both want everything: 3 to 1", []Claim{claim(3, 1000, 400), claim(1, 1000, 400)},
			[]Amount{{750, 300}, {250, 100}}},
		{"the light queue asks little: the heavy one gets the rest", []Claim{claim(3, 1000, 400), claim(1, 100, 20)},
			[]Amount{{900, 380}, {100, 20}}},
		{"nobody is short: everyone gets the request", []Claim{claim(3, 200, 100), claim(1, 300, 100)},
			[]Amount{{200, 100}, {300, 100}}},
		{"dimensions are divided independently", []Claim{claim(1, 1000, 10), claim(1, 10, 400)},
			[]Amount{{990, 10}, {10, 390}}},
		{"a capability caps the share and frees the rest", []Claim{
			{Weight: 3, Request: Amount{1000, 400}, Capability: Amount{MemoryMiB: 300, Cores: math.Inf(1)}}, claim(1, 1000, 400)},
			[]Amount{{300, 300}, {700, 100}}},
		{"weight 0 deserves nothing", []Claim{claim(0, 500, 100), claim(1, 200, 100)},
			[]Amount{{0, 0}, {200, 100}}},
		{"three queues, one satisfied early", []Claim{claim(1, 1000, 400), claim(1, 1000, 400), claim(2, 100, 0)},
			[]Amount{{450, 200}, {450, 200}, {100, 0}}},
		{"a guarantee above the weighted part is kept; the rest goes by weight", []Claim{
			guaranteed(claim(1, 1000, 400), 600, 200), claim(3, 1000, 400)},
			[]Amount{{600, 200}, {400, 200}}},
		{"a guarantee below the weighted part changes nothing", []Claim{
			guaranteed(claim(1, 1000, 400), 100, 50), claim(1, 1000, 400)},
			[]Amount{{500, 200}, {500, 200}}},
		{"a guarantee counts only as far as the queue asks", []Claim{
			guaranteed(claim(1, 300, 100), 800, 300), claim(1, 1000, 400)},
			[]Amount{{300, 100}, {700, 300}}},
		{"guarantees beyond the total are cut in proportion", []Claim{
			guaranteed(claim(1, 1000, 400), 600, 300), guaranteed(claim(1, 1000, 400), 900, 300)},
			[]Amount{{400, 200}, {600, 200}}},
		{"weight 0 keeps its guarantee", []Claim{guaranteed(claim(0, 500, 100), 200, 40), claim(1, 1000, 400)},
			[]Amount{{200, 40}, {800, 360}}},
		{"no claims", nil, []Amount{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Divide(total, tt.claims)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d amounts, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if math.Abs(got[i].MemoryMiB-tt.want[i].MemoryMiB) > 1e-6 || math.Abs(got[i].Cores-tt.want[i].Cores) > 1e-6 {
					t.Errorf("claim %d: got %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestDivideProperties checks, over random claims, what any fair division must
// hold: nothing beyond the total, a request or a capability; everything handed out
// when demand exceeds supply; and no queue short of its demand while another holds
// more per unit of weight.
func TestDivideProperties(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for round := 0; round < 2000; round++ {
		total := Amount{MemoryMiB: float64(r.Intn(100000)), Cores: float64(r.Intn(3200))}
		claims := make([]Claim, 1+r.Intn(6))
		for i := range claims {
			claims[i] = claim(float64(r.Intn(5)), float64(r.Intn(60000)), float64(r.Intn(2000)))
			if r.Intn(4) == 0 {
				claims[i].Capability = Amount{MemoryMiB: float64(r.Intn(30000)), Cores: float64(r.Intn(900))}
			}
		}
		got := Divide(total, claims)
		dims := []struct {
			name   string
			of     func(Amount) float64
			supply float64
		}{{"memory", func(a Amount) float64 { return a.MemoryMiB }, total.MemoryMiB}, {"cores", func(a Amount) float64 { return a.Cores }, total.Cores}}
		for _, d := range dims {
			sum, demand := 0.0, 0.0
			for i, c := range claims {
				want := 0.0
				if c.Weight > 0 {
					want = math.Min(d.of(c.Request), d.of(c.Capability))
				}
				demand += want
				sum += d.of(got[i])
				if d.of(got[i]) > want+1e-6 || d.of(got[i]) < 0 {
					t.Fatalf("round %d %s: claim %d got %v of demand %v", round, d.name, i, d.of(got[i]), want)
				}
				if d.of(got[i]) < want-1e-6 {
					for j, o := range claims {
						if o.Weight > 0 && d.of(got[j])/o.Weight > d.of(got[i])/c.Weight+1e-6 {
							t.Fatalf("round %d %s: claim %d is short (%v of %v, weight %v) while claim %d holds %v at weight %v",
								round, d.name, i, d.of(got[i]), want, c.Weight, j, d.of(got[j]), o.Weight)
						}
					}
				}
			}
			if sum > d.supply+1e-6 {
				t.Fatalf("round %d %s: handed out %v of %v", round, d.name, sum, d.supply)
			}
			if want := math.Min(demand, d.supply); sum < want-1e-6 {
				t.Fatalf("round %d %s: handed out %v, want %v (demand %v, supply %v)", round, d.name, sum, want, demand, d.supply)
			}
		}
	}
}

// TestDivideGuarantees checks, over random claims with guarantees, that a queue gets
// at least its guarantee (within its request, and in proportion when the guarantees
// exceed the total), never more than its request, capability or the total, and that
// the total is handed out when demand exceeds it.
func TestDivideGuarantees(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for round := 0; round < 2000; round++ {
		total := float64(r.Intn(3200))
		claims := make([]Claim, 1+r.Intn(6))
		floor, demand := make([]float64, len(claims)), make([]float64, len(claims))
		sumFloor, sumDemand := 0.0, 0.0
		for i := range claims {
			claims[i] = guaranteed(claim(float64(r.Intn(5)), 0, float64(r.Intn(2000))), 0, float64(r.Intn(1000)))
			demand[i] = claims[i].Request.Cores
			if claims[i].Weight > 0 {
				sumDemand += demand[i]
			} else {
				sumDemand += math.Min(claims[i].Guarantee.Cores, demand[i])
			}
			floor[i] = math.Min(claims[i].Guarantee.Cores, demand[i])
			sumFloor += floor[i]
		}
		got := Divide(Amount{Cores: total}, claims)
		sum := 0.0
		for i, g := range got {
			sum += g.Cores
			want := floor[i]
			if sumFloor > total {
				want = floor[i] * total / sumFloor
			}
			if g.Cores < want-1e-6 || g.Cores > demand[i]+1e-6 {
				t.Fatalf("round %d: claim %d (weight %v, guarantee %v, request %v) got %v of %v", round, i, claims[i].Weight,
					claims[i].Guarantee.Cores, demand[i], g.Cores, total)
			}
		}
		if sum > total+1e-6 || sum < math.Min(total, sumDemand)-1e-6 {
			t.Fatalf("round %d: handed out %v of %v (demand %v)", round, sum, total, sumDemand)
		}
	}
}

func TestWithin(t *testing.T) {
	limit := Amount{MemoryMiB: 0.3 * 3, Cores: 100}
	if !(Amount{MemoryMiB: 0.1 + 0.1 + 0.1 + 0.3 + 0.3, Cores: 100}).Within(limit) {
		t.Error("float rounding refused an amount equal to the limit")
	}
	if (Amount{MemoryMiB: 0.9, Cores: 101}).Within(limit) {
		t.Error("cores over the limit accepted")
	}
	if !(Amount{MemoryMiB: 1e12, Cores: 1e6}).Within(Unlimited) {
		t.Error("unlimited refused")
	}
}

func TestCost(t *testing.T) {
	req := []api.ContainerRequest{
		{Name: "a", Cards: 2, MemoryMiB: 1000, Cores: 30},
		{Name: "b", Cards: 1, MemoryPercent: 50, Cores: 0},
		{Name: "c", Cards: 1, MemoryPercent: 1, Cores: 100},
	}
	if got, want := (Cards{RefMiB: 40000}).Requested(req, false), (Amount{MemoryMiB: 2000 + 20000 + 400, Cores: 160}); got != want {
		t.Errorf("Requested = %v, want %v", got, want)
	}
	if got := (Cards{}).Requested([]api.ContainerRequest{{Cards: 1, MemoryPercent: 10}}, false); got.MemoryMiB != 1 {
		t.Errorf("a percentage with no known card size costs %v MiB, want the 1 MiB floor", got.MemoryMiB)
	}
	as := []api.ContainerAssignment{{Name: "a", Cards: []api.CardAssignment{{UUID: "x", MemoryMiB: 500, Cores: 20}, {UUID: "y", MemoryMiB: 700, Cores: 20}}}}
	if got, want := (Cards{}).Assigned(as, false), (Amount{MemoryMiB: 1200, Cores: 40}); got != want {
		t.Errorf("Assigned = %v, want %v", got, want)
	}
}

func TestSpareLeavesOtherQueuesTheirEntitlement(t *testing.T) {
	total := Amount{MemoryMiB: 1000, Cores: 300}
	hs := []Holding{
		// a: holds its whole share and wants no more
		{Allocated: Amount{MemoryMiB: 300, Cores: 100}, Deserved: Amount{MemoryMiB: 300, Cores: 100}, Request: Amount{MemoryMiB: 300, Cores: 100}},
		// b: holds 50 of a 100-core share and asks for 150: 50 more are its to claim
		{Allocated: Amount{MemoryMiB: 100, Cores: 50}, Deserved: Amount{MemoryMiB: 300, Cores: 100}, Request: Amount{MemoryMiB: 400, Cores: 150}},
		// c: holds nothing; its task is larger than its share
		{Deserved: Amount{MemoryMiB: 400, Cores: 100}, Request: Amount{MemoryMiB: 500, Cores: 150}},
	}
	// Free: 600 MiB, 150 cores; b may still claim 200 MiB and 50 cores.
	if got, want := Spare(total, hs, 2), (Amount{MemoryMiB: 400, Cores: 100}); got != want {
		t.Errorf("spare for c = %v, want %v", got, want)
	}
	// For b, c's unmet share (400 MiB, 100 cores) is reserved.
	if got, want := Spare(total, hs, 1), (Amount{MemoryMiB: 200, Cores: 50}); got != want {
		t.Errorf("spare for b = %v, want %v", got, want)
	}
	if got := Spare(Amount{MemoryMiB: 10, Cores: 10}, hs, 0); got != (Amount{}) {
		t.Errorf("an over-committed cluster has spare %v, want none", got)
	}
}

// A MIG instance counts as its memory and its compute slices of seven: by the profile's
// name while pending, with the instance's exact memory once placed; a profile that
// does not read charges the whole card's cores rather than none.
// Whole MIG instances are not charged to queues, before or after placement: only the
// cards beside them count.
func TestMIGInstancesCostNothingInTheQueueShares(t *testing.T) {
	req := []api.ContainerRequest{{Cards: 2, MemoryPercent: 100, Cores: 100, MIGProfile: "3g.40gb"}, {Cards: 1, MemoryMiB: 1000, Cores: 20}}
	cards := Cards{RefMiB: 81920, WholeMiB: 81920, CapacityMiB: capacities(map[string]int64{"GPU-a": 81920, "GPU-b": 81920})}
	held := []api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 40320, Cores: 100, MIG: "MIG-a"},
		{UUID: "GPU-b", MemoryMiB: 1000, Cores: 20}}}}
	for _, idleOnly := range []bool{false, true} {
		// An idle-only pod's MIG instance is free as well; its other card is whole.
		wantReq, wantHeld := Amount{MemoryMiB: 1000, Cores: 20}, Amount{MemoryMiB: 1000, Cores: 20}
		if idleOnly {
			wantReq, wantHeld = Amount{MemoryMiB: 81920, Cores: 100}, Amount{MemoryMiB: 81920, Cores: 100}
		}
		if got := cards.Requested(req, idleOnly); got != wantReq {
			t.Errorf("idle-only %t: Requested = %v, want %v (the MIG container free)", idleOnly, got, wantReq)
		}
		if got := cards.Assigned(held, idleOnly); got != wantHeld {
			t.Errorf("idle-only %t: Assigned = %v, want %v (the instance free)", idleOnly, got, wantHeld)
		}
	}
}

func capacities(m map[string]int64) func(string) (int64, bool) {
	return func(uuid string) (int64, bool) {
		mib, ok := m[uuid]
		return mib, ok
	}
}

// A pod that asks for idle cards only holds each of its cards alone, so it is charged
// each whole, whatever it asked: the same tiny request shared is charged what it asks.
func TestIdleOnlyPodsAreChargedWholeCards(t *testing.T) {
	cards := Cards{RefMiB: 40960, WholeMiB: 81920, // oversubscription 2
		CapacityMiB: capacities(map[string]int64{"GPU-0": 81920, "GPU-1": 81920, "GPU-big": 163840})}
	pending := []struct {
		name string
		req  []api.ContainerRequest
		idle bool
		want Amount
	}{
		{"a tiny shared request costs what it asks", []api.ContainerRequest{{Cards: 2, MemoryMiB: 1, Cores: 1}}, false,
			Amount{MemoryMiB: 2, Cores: 2}},
		{"the same request idle-only costs two whole reference cards", []api.ContainerRequest{{Cards: 2, MemoryMiB: 1, Cores: 1}}, true,
			Amount{MemoryMiB: 2 * 81920, Cores: 200}},
		{"a percentage idle-only costs whole reference cards", []api.ContainerRequest{{Cards: 1, MemoryPercent: 10}}, true,
			Amount{MemoryMiB: 81920, Cores: 100}},
		{"an idle-only ask above the reference card costs what it asks, with every core",
			[]api.ContainerRequest{{Cards: 1, MemoryMiB: 100000, Cores: 10}}, true, Amount{MemoryMiB: 100000, Cores: 100}},
		{"each container's cards count before they are chosen",
			[]api.ContainerRequest{{Cards: 1, MemoryMiB: 10, Cores: 10}, {Cards: 1, MemoryMiB: 10, Cores: 10}}, true,
			Amount{MemoryMiB: 2 * 81920, Cores: 200}},
	}
	for _, tc := range pending {
		if got := cards.Requested(tc.req, tc.idle); got != tc.want {
			t.Errorf("%s: Requested = %v, want %v", tc.name, got, tc.want)
		}
	}
	placed := []struct {
		name string
		cs   []api.ContainerAssignment
		idle bool
		want Amount
	}{
		{"shared: what was assigned", []api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 1, Cores: 1}}}}, false,
			Amount{MemoryMiB: 1, Cores: 1}},
		{"idle-only: the card's schedulable memory and every core",
			[]api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 1, Cores: 1}}}}, true,
			Amount{MemoryMiB: 81920, Cores: 100}},
		{"idle-only: two containers on one card pay for it once, a card of its own size on another",
			[]api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 1, Cores: 1}}},
				{Cards: []api.CardAssignment{{UUID: "GPU-0", MemoryMiB: 5, Cores: 5}, {UUID: "GPU-big", MemoryMiB: 5, Cores: 5}}}}, true,
			Amount{MemoryMiB: 81920 + 163840, Cores: 200}},
		{"idle-only on a card the book does not know: a reference card",
			[]api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-gone", MemoryMiB: 1, Cores: 1}}}}, true,
			Amount{MemoryMiB: 81920, Cores: 100}},
		{"idle-only never less than was assigned",
			[]api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-gone", MemoryMiB: 90000, Cores: 1}}}}, true,
			Amount{MemoryMiB: 90000, Cores: 100}},
	}
	for _, tc := range placed {
		if got := cards.Assigned(tc.cs, tc.idle); got != tc.want {
			t.Errorf("%s: Assigned = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Without sizes (Cards{}), an idle-only pod still pays every core of each card.
	if got, want := (Cards{}).Assigned(placed[1].cs, true), (Amount{MemoryMiB: 1, Cores: 100}); got != want {
		t.Errorf("without card sizes: Assigned = %v, want %v", got, want)
	}
}
