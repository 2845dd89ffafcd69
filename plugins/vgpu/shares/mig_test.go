package shares

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

func slicesOf(n float64) fairshare.Amount { return fairshare.Amount{MIGSlices: n} }

// Two queues of weight 3 and 1, each asking for more 1g instances than the 14 slices
// of two MIG cards, beside 800 cores of plain cards: the slices divide 10.5 and 3.5.
// mig-heavy holds 12 slices (above its share) and 100 cores (below it); mig-light
// holds 2 slices and 700 cores (above its card share).
func migContended(t *testing.T) *Shares {
	t.Helper()
	s := New(fairshare.Amount{MemoryMiB: 800000, Cores: 800, MIGSlices: 14}, fairshare.Cards{RefMiB: 40960, WholeMiB: 40960},
		api.DefaultResourceNames())
	heavy, light := queueInfo("mig-heavy", 3, 0, 0), queueInfo("mig-light", 1, 0, 0)
	s.Hold(heavy, "h-mig", slicesOf(12))
	s.Hold(heavy, "h-card", cores(100))
	s.Hold(light, "l-mig", slicesOf(2))
	s.Hold(light, "l-card", cores(700))
	for i := 0; i < 14; i++ {
		s.Ask(heavy, slicesOf(1))
		s.Ask(light, slicesOf(1))
	}
	s.Ask(heavy, cores(600))
	s.Ask(light, cores(600))
	s.Divide()
	return s
}

func TestMIGSlicesAreAShareOfTheirOwn(t *testing.T) {
	s := migContended(t)
	got := s.Standings()
	if got[0].Deserved.MIGSlices != 10.5 || got[1].Deserved.MIGSlices != 3.5 || got[0].Deserved.Cores != 600 || got[1].Deserved.Cores != 200 {
		t.Fatalf("deserved %v and %v; want 10.5 and 3.5 MIG slices, 600 and 200 cores", got[0].Deserved, got[1].Deserved)
	}
	// A MIG pod of the queue above its MIG share is held, with the slices named; a
	// card pod of the same queue is not (it is below its card share).
	ok, why := s.Admit("mig-heavy", slicesOf(1))
	if ok || !strings.Contains(why, "MIG slices 12 held + 1 asked > 10.5 deserved") || strings.Contains(why, "cores") {
		t.Errorf("mig-heavy's 1g pod: %t, %q; want it held by its MIG slices alone", ok, why)
	}
	if ok, why := s.Admit("mig-heavy", cores(100)); !ok {
		t.Errorf("mig-heavy's card pod is held by its MIG holdings: %s", why)
	}
	// The queue above its card share places MIG pods below its MIG share, and not
	// card pods.
	if ok, why := s.Admit("mig-light", slicesOf(1)); !ok {
		t.Errorf("mig-light's 1g pod is held by its card holdings: %s", why)
	}
	if ok, why := s.Admit("mig-light", cores(10)); ok || strings.Contains(why, "MIG") {
		t.Errorf("mig-light's card pod: %t, %q; want it held by cores alone", ok, why)
	}
	// Reclaim: each queue may be reclaimed from only in the dimension it is above.
	if !s.AboveShareFor("mig-heavy", slicesOf(1)) || s.AboveShareFor("mig-heavy", cores(1)) || s.AboveShare("mig-heavy") {
		t.Error("mig-heavy is above its MIG share only")
	}
	if s.AboveShareFor("mig-light", slicesOf(1)) || !s.AboveShareFor("mig-light", cores(1)) || !s.AboveShare("mig-light") {
		t.Error("mig-light is above its card share only")
	}
	if !s.MayReclaim("mig-light", slicesOf(1)) || s.MayReclaim("mig-heavy", slicesOf(1)) {
		t.Error("the queue below its MIG share may reclaim instances; the one above may not")
	}
	if !s.MayReclaim("mig-heavy", cores(100)) || s.MayReclaim("mig-light", cores(1)) {
		t.Error("MIG holdings changed who may reclaim cards")
	}
	// Gangs: entitled in the dimension they ask for only.
	if !s.Entitled("mig-light", []fairshare.Amount{slicesOf(1)}, 1) || s.Entitled("mig-heavy", []fairshare.Amount{slicesOf(1)}, 1) {
		t.Error("entitlement to MIG slices")
	}
	if !s.Entitled("mig-heavy", []fairshare.Amount{cores(100)}, 1) {
		t.Error("mig-heavy's card gang is not entitled because of its MIG holdings")
	}
	// No queue's capability bounds MIG slices (Volcano queues have no resource for them).
	if why := s.BeyondCapability("mig-heavy", []fairshare.Amount{slicesOf(100)}, 1); why != "" {
		t.Errorf("a MIG gang beyond a capability: %s", why)
	}
}

// Work-conserving: the slices a queue does not ask for are lent to the other.
func TestMIGSlicesAreLentWhenUnclaimed(t *testing.T) {
	s := New(fairshare.Amount{Cores: 100, MemoryMiB: 100000, MIGSlices: 14}, fairshare.Cards{}, api.DefaultResourceNames())
	a, b := queueInfo("a", 1, 0, 0), queueInfo("b", 1, 0, 0)
	s.Hold(a, "a-1", slicesOf(7))
	s.Ask(a, slicesOf(3))
	s.Ask(b, slicesOf(2))
	s.Divide()
	// a deserves 12 (14 less b's 2); past that it may borrow only what b does not claim.
	if ok, why := s.Admit("a", slicesOf(3)); !ok {
		t.Errorf("a's 3g pod within its share of 12: %s", why)
	}
	s.Place("a-2", "a", slicesOf(3), slicesOf(3))
	if ok, _ := s.Admit("a", slicesOf(3)); ok {
		t.Error("a borrowed the 2 slices b asks for (and 1 more than exist)")
	}
	if ok, why := s.Admit("b", slicesOf(2)); !ok {
		t.Errorf("b's share: %s", why)
	}
}

// Without MIG cards that take pods there is no MIG share: a MIG pod is not refused by
// its queue, and waits for instances with the predicate's reasons.
func TestNoMIGSupplyHoldsNobody(t *testing.T) {
	s := New(fairshare.Amount{Cores: 100, MemoryMiB: 100000}, fairshare.Cards{}, api.DefaultResourceNames())
	a := queueInfo("a", 1, 0, 0)
	s.Ask(a, slicesOf(2))
	s.Divide()
	if ok, why := s.Admit("a", slicesOf(2)); !ok {
		t.Errorf("a MIG pod refused by a share of no MIG cards: %s", why)
	}
}
