package fairshare

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
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
			[]Amount{{MemoryMiB: 750, Cores: 300}, {MemoryMiB: 250, Cores: 100}}},
		{"the light queue asks little: the heavy one gets the rest", []Claim{claim(3, 1000, 400), claim(1, 100, 20)},
			[]Amount{{MemoryMiB: 900, Cores: 380}, {MemoryMiB: 100, Cores: 20}}},
		{"nobody is short: everyone gets the request", []Claim{claim(3, 200, 100), claim(1, 300, 100)},
			[]Amount{{MemoryMiB: 200, Cores: 100}, {MemoryMiB: 300, Cores: 100}}},
		{"dimensions are divided independently", []Claim{claim(1, 1000, 10), claim(1, 10, 400)},
			[]Amount{{MemoryMiB: 990, Cores: 10}, {MemoryMiB: 10, Cores: 390}}},
		{"a capability caps the share and frees the rest", []Claim{
			{Weight: 3, Request: Amount{MemoryMiB: 1000, Cores: 400}, Capability: Amount{MemoryMiB: 300, Cores: math.Inf(1)}}, claim(1, 1000, 400)},
			[]Amount{{MemoryMiB: 300, Cores: 300}, {MemoryMiB: 700, Cores: 100}}},
		{"weight 0 deserves nothing", []Claim{claim(0, 500, 100), claim(1, 200, 100)},
			[]Amount{{MemoryMiB: 0, Cores: 0}, {MemoryMiB: 200, Cores: 100}}},
		{"three queues, one satisfied early", []Claim{claim(1, 1000, 400), claim(1, 1000, 400), claim(2, 100, 0)},
			[]Amount{{MemoryMiB: 450, Cores: 200}, {MemoryMiB: 450, Cores: 200}, {MemoryMiB: 100, Cores: 0}}},
		{"a guarantee above the weighted part is kept; the rest goes by weight", []Claim{
			guaranteed(claim(1, 1000, 400), 600, 200), claim(3, 1000, 400)},
			[]Amount{{MemoryMiB: 600, Cores: 200}, {MemoryMiB: 400, Cores: 200}}},
		{"a guarantee below the weighted part changes nothing", []Claim{
			guaranteed(claim(1, 1000, 400), 100, 50), claim(1, 1000, 400)},
			[]Amount{{MemoryMiB: 500, Cores: 200}, {MemoryMiB: 500, Cores: 200}}},
		{"a guarantee counts only as far as the queue asks", []Claim{
			guaranteed(claim(1, 300, 100), 800, 300), claim(1, 1000, 400)},
			[]Amount{{MemoryMiB: 300, Cores: 100}, {MemoryMiB: 700, Cores: 300}}},
		{"guarantees beyond the total are cut in proportion", []Claim{
			guaranteed(claim(1, 1000, 400), 600, 300), guaranteed(claim(1, 1000, 400), 900, 300)},
			[]Amount{{MemoryMiB: 400, Cores: 200}, {MemoryMiB: 600, Cores: 200}}},
		{"weight 0 keeps its guarantee", []Claim{guaranteed(claim(0, 500, 100), 200, 40), claim(1, 1000, 400)},
			[]Amount{{MemoryMiB: 200, Cores: 40}, {MemoryMiB: 800, Cores: 360}}},
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

// Whole MIG instances are charged in MIG slices of their own, before and after
// placement, never in card memory or cores: the cards beside them count as before.
func TestMIGInstancesAreChargedInSlices(t *testing.T) {
	req := []api.ContainerRequest{{Cards: 2, MemoryPercent: 100, Cores: 100, MIGProfile: "3g.40gb"}, {Cards: 1, MemoryMiB: 1000, Cores: 20}}
	cards := Cards{RefMiB: 81920, WholeMiB: 81920, CapacityMiB: capacities(map[string]int64{"GPU-a": 81920, "GPU-b": 81920}),
		InstanceSlices: func(mig string) (float64, bool) { return 3, mig == "MIG-a" }}
	held := []api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 40320, Cores: 100, MIG: "MIG-a"},
		{UUID: "GPU-b", MemoryMiB: 1000, Cores: 20}}}}
	for _, idleOnly := range []bool{false, true} {
		// An idle-only pod's MIG instance counts its slices only; its other card is whole.
		wantReq, wantHeld := Amount{MemoryMiB: 1000, Cores: 20, MIGSlices: 6}, Amount{MemoryMiB: 1000, Cores: 20, MIGSlices: 3}
		if idleOnly {
			wantReq, wantHeld = Amount{MemoryMiB: 81920, Cores: 100, MIGSlices: 6}, Amount{MemoryMiB: 81920, Cores: 100, MIGSlices: 3}
		}
		if got := cards.Requested(req, idleOnly); got != wantReq {
			t.Errorf("idle-only %t: Requested = %v, want %v (two 3g instances: 6 slices)", idleOnly, got, wantReq)
		}
		if got := cards.Assigned(held, idleOnly); got != wantHeld {
			t.Errorf("idle-only %t: Assigned = %v, want %v (the 3g instance: 3 slices)", idleOnly, got, wantHeld)
		}
	}
	// An instance the book does not know counts the least any instance takes.
	unknown := []api.ContainerAssignment{{Cards: []api.CardAssignment{{UUID: "GPU-c", MemoryMiB: 9856, Cores: 100, MIG: "MIG-c"}}}}
	if got, want := cards.Assigned(unknown, false), (Amount{MIGSlices: 1}); got != want {
		t.Errorf("unknown instance: Assigned = %v, want %v", got, want)
	}
	if got, want := (Cards{}).Assigned(held, false), (Amount{MemoryMiB: 1000, Cores: 20, MIGSlices: 1}); got != want {
		t.Errorf("no instance lookup: Assigned = %v, want %v", got, want)
	}
}

func TestMIGSlicesOfAProfile(t *testing.T) {
	for profile, want := range map[string]float64{"1g.10gb": 1, "1g.10gb+me": 1, "1g.24gb+me.all": 1, "3g.40gb": 3, "7g.80gb": 7, "4g.90gb": 4, "12g.1gb": 12} {
		if got, err := MIGSlices(profile); err != nil || got != want {
			t.Errorf("MIGSlices(%q) = %v, %v; want %v", profile, got, err, want)
		}
	}
	for _, bad := range []string{"", "g.10gb", "0g.10gb", "01g.10gb", "-1g.10gb", "3.40gb", "xg.10gb", "3g", "+3g.40gb"} {
		if got, err := MIGSlices(bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("MIGSlices(%q) = %v, %v; want an error naming it", bad, got, err)
		}
	}
}

// MIG slices are divided on their own, by weight, whatever the queues hold of card
// memory and cores; and card memory and cores divide as if there were no MIG.
func TestDivideMIGSlicesOnTheirOwn(t *testing.T) {
	total := Amount{MemoryMiB: 1000, Cores: 400, MIGSlices: 14}
	claims := []Claim{
		{Weight: 3, Request: Amount{MIGSlices: 20}, Capability: Unlimited},
		{Weight: 1, Request: Amount{MemoryMiB: 1000, Cores: 400, MIGSlices: 20}, Capability: Unlimited},
		{Weight: 4, Request: Amount{MemoryMiB: 1000, Cores: 400}, Capability: Unlimited},
	}
	got := Divide(total, claims)
	want := []Amount{{MIGSlices: 10.5}, {MemoryMiB: 200, Cores: 80, MIGSlices: 3.5}, {MemoryMiB: 800, Cores: 320}}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Errorf("queue %d deserves %v, want %v", i, got[i], want[i])
		}
	}
	// A MIG guarantee and capability bound the slices as they do the other dimensions.
	claims[0].Guarantee = Amount{MIGSlices: 2}
	claims[1].Guarantee = Amount{MIGSlices: 6}
	claims[0].Capability.MIGSlices = 5
	got = Divide(total, claims)
	if got[0].MIGSlices != 5 || got[1].MIGSlices != 9 {
		t.Errorf("with a capability of 5 and a guarantee of 6, slices divide %v and %v, want 5 and 9", got[0].MIGSlices, got[1].MIGSlices)
	}
}

func near(a, b Amount) bool {
	return math.Abs(a.MemoryMiB-b.MemoryMiB) < 1e-6 && math.Abs(a.Cores-b.Cores) < 1e-6 && math.Abs(a.MIGSlices-b.MIGSlices) < 1e-6
}

// A queue's unmet MIG share is kept from the others' borrowing only when its smallest
// pending MIG task fits in it; card tasks neither reserve nor free MIG slices.
func TestSpareMIGSlices(t *testing.T) {
	total := Amount{MemoryMiB: 1000, Cores: 400, MIGSlices: 14}
	hs := []Holding{
		{Allocated: Amount{MIGSlices: 4}, Deserved: Amount{MIGSlices: 7}, Request: Amount{MIGSlices: 12}, MinMIGAsk: Amount{MIGSlices: 1}},
		{Allocated: Amount{MemoryMiB: 500, Cores: 200}, Deserved: Amount{MemoryMiB: 1000, Cores: 400, MIGSlices: 7},
			Request: Amount{MemoryMiB: 1000, Cores: 400, MIGSlices: 7}, MinAsk: Amount{MemoryMiB: 500, Cores: 200}, MinMIGAsk: Amount{MIGSlices: 7}},
	}
	// For queue 1: 10 slices free, 3 of them queue 0's to claim; half the card share free.
	if got, want := Spare(total, hs, 1), (Amount{MemoryMiB: 500, Cores: 200, MIGSlices: 7}); got != want {
		t.Errorf("spare for queue 1 = %v, want %v", got, want)
	}
	// For queue 0: queue 1's unmet 7 slices are reserved; its card share is not
	// reachable by queue 0's MIG tasks but is reserved all the same.
	if got, want := Spare(total, hs, 0), (Amount{MIGSlices: 3}); got != want {
		t.Errorf("spare for queue 0 = %v, want %v", got, want)
	}
	// A smallest MIG task of 4 slices cannot use an unmet share of 3: nothing reserved.
	hs[0].MinMIGAsk = Amount{MIGSlices: 4}
	if got, want := Spare(total, hs, 1), (Amount{MemoryMiB: 500, Cores: 200, MIGSlices: 10}); got != want {
		t.Errorf("spare for queue 1 = %v, want %v", got, want)
	}
}

func TestBelowMIGShare(t *testing.T) {
	share := Amount{MemoryMiB: 100, Cores: 100, MIGSlices: 7}
	if !Below(Amount{MemoryMiB: 500, Cores: 500, MIGSlices: 6}, share, Amount{MIGSlices: 3}) {
		t.Error("a MIG task of a queue below its MIG share is held by its card holdings")
	}
	if Below(Amount{MIGSlices: 7}, share, Amount{MIGSlices: 1}) {
		t.Error("a MIG task of a queue at its MIG share is below it")
	}
	if !Below(Amount{MIGSlices: 70}, share, Amount{MemoryMiB: 10, Cores: 10}) {
		t.Error("a card task is held by its queue's MIG holdings")
	}
}

func TestAmountStringNamesMIGSlicesOnlyWhenThere(t *testing.T) {
	if got, want := (Amount{MemoryMiB: 1, Cores: 2}).String(), "memory 1 MiB, cores 2"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got, want := (Amount{MemoryMiB: 1, Cores: 2, MIGSlices: 3}).String(), "memory 1 MiB, cores 2, MIG slices 3"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got, want := Unlimited.String(), "memory unlimited MiB, cores unlimited"; got != want {
		t.Errorf("String = %q, want %q", got, want)
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

// MIGSlices never panics, and agrees with the name check requests are read with: every
// name api.ValidateMIGProfileName accepts has its slices, between 1 and 9999.
func FuzzMIGSlices(f *testing.F) {
	for _, s := range []string{"1g.10gb", "3g.40gb", "7g.80gb", "1g.10gb+me", "1g.24gb+me.all", "", "g.", "0g.1gb", "99999g.1gb", "3g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := MIGSlices(s)
		if err == nil && (n < 1 || n != math.Trunc(n)) {
			t.Fatalf("MIGSlices(%q) = %v", s, n)
		}
		if api.ValidateMIGProfileName(s) == nil && (err != nil || n > 9999) {
			t.Fatalf("a valid profile %q reads as %v, %v", s, n, err)
		}
	})
}

// A MIG card adds the slices of the GPU instances its layout holds (each once, however
// many compute instances share it), whatever its model; a card whose layout is unknown
// or empty, or not in MIG mode, nothing.
func TestCardMIGSlices(t *testing.T) {
	layout := []api.MIGInstance{{GI: 1, Profile: "3g.40gb"}, {GI: 1, Profile: "3g.40gb"}, {GI: 2, Profile: "2g.20gb"}}
	for _, tc := range []struct {
		card api.Card
		want float64
	}{
		{api.Card{Model: "NVIDIA H100 80GB HBM3", MIG: true}, 0},
		{api.Card{Model: "NVIDIA H100 80GB HBM3", MIG: true, MIGInstances: []api.MIGInstance{{GI: 1, Profile: "3g.40gb"}, {GI: 2, Profile: "3g.40gb"}}}, 6},
		{api.Card{Model: "NVIDIA B200", MIG: true, MIGInstances: layout}, 5},
		{api.Card{Model: "NVIDIA Future", MIG: true, MIGInstances: layout}, 5},
		{api.Card{Model: "NVIDIA Future", MIG: true}, 0},
		{api.Card{Model: "NVIDIA H100 80GB HBM3"}, 0},
	} {
		if got := CardMIGSlices(tc.card); got != tc.want {
			t.Errorf("%s (MIG %t, %d instances): %v slices, want %v", tc.card.Model, tc.card.MIG, len(tc.card.MIGInstances), got, tc.want)
		}
	}
}
