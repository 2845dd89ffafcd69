package vgpu

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

const wholeMiB = 40960

// draHolderOf builds a candidate of job that holds (uuid, MiB, cores) shares.
func draHolderOf(id, job string, shares ...api.CardAssignment) draHolder {
	h := draHolder{ID: id, Job: job, Cards: shares}
	for _, s := range shares {
		h.Cost = h.Cost.Add(fairshare.Amount{MemoryMiB: float64(s.MemoryMiB), Cores: float64(s.Cores)})
	}
	return h
}

func share(uuid string, mib int64, cores int) api.CardAssignment {
	return api.CardAssignment{UUID: uuid, MemoryMiB: mib, Cores: cores}
}

// cardsHeldBy is cards c0..c(n-1) of wholeMiB with the holders' shares booked.
func cardsHeldBy(n int, holders ...draHolder) []draCard {
	cards := make([]draCard, n)
	for i := range cards {
		cards[i] = draCard{UUID: fmt.Sprintf("c%d", i), CapacityMiB: wholeMiB}
	}
	for _, h := range holders {
		for _, s := range h.Cards {
			for i := range cards {
				if cards[i].UUID == s.UUID {
					cards[i].UsedMiB += s.MemoryMiB
					cards[i].UsedCores += s.Cores
				}
			}
		}
	}
	return cards
}

func TestPickDRAVictims(t *testing.T) {
	whole := draAsk{Cores: 100}
	elsewhere := draHolderOf("x", "j9", share("other-node-card", wholeMiB, 100))
	for _, tt := range []struct {
		name    string
		cards   int
		holders []draHolder
		asks    []draAsk
		spare   map[string]int
		want    []string
		already bool
	}{{
		name:    "a claim that fits an idle card evicts nobody",
		cards:   2,
		holders: []draHolder{draHolderOf("a", "j1", share("c0", wholeMiB, 100))},
		asks:    []draAsk{whole},
		spare:   map[string]int{"j1": 1},
		already: true,
	}, {
		name:  "a whole card comes from the one pod that holds a card whole, not from the cheaper shares of another card",
		cards: 2,
		holders: []draHolder{draHolderOf("whole", "j1", share("c0", wholeMiB, 100)),
			draHolderOf("half1", "j1", share("c1", 20480, 50)), draHolderOf("half2", "j1", share("c1", 20480, 50))},
		asks:  []draAsk{whole},
		spare: map[string]int{"j1": 3},
		want:  []string{"whole"},
	}, {
		name:    "a share comes from the cheapest holder whose leaving makes room",
		cards:   1,
		holders: []draHolder{draHolderOf("big", "j1", share("c0", 30000, 60)), draHolderOf("small", "j1", share("c0", 10960, 40))},
		asks:    []draAsk{{MemoryMiB: 8000, Cores: 30}},
		spare:   map[string]int{"j1": 2},
		want:    []string{"small"},
	}, {
		name:    "cores are freed as well as memory",
		cards:   1,
		holders: []draHolder{draHolderOf("cores", "j1", share("c0", 1000, 90)), draHolderOf("memory", "j1", share("c0", 39000, 0))},
		asks:    []draAsk{{MemoryMiB: 1000, Cores: 20}},
		spare:   map[string]int{"j1": 2},
		want:    []string{"cores"},
	}, {
		name:  "two cards of one request take two victims",
		cards: 3,
		holders: []draHolder{draHolderOf("h1", "j1", share("c0", wholeMiB, 100)), draHolderOf("h2", "j1", share("c1", wholeMiB, 100)),
			draHolderOf("h3", "j1", share("c2", wholeMiB, 100))},
		asks:  []draAsk{whole, whole},
		spare: map[string]int{"j1": 3},
		want:  []string{"h1", "h2"},
	}, {
		name:  "a gang keeps its minimum: one of its two pods, the other victim from another job",
		cards: 3,
		holders: []draHolder{draHolderOf("g1", "gang", share("c0", wholeMiB, 100)), draHolderOf("g2", "gang", share("c1", wholeMiB, 100)),
			draHolderOf("o1", "other", share("c2", wholeMiB, 100))},
		asks:  []draAsk{whole, whole},
		spare: map[string]int{"gang": 1, "other": 1},
		want:  []string{"g1", "o1"},
	}, {
		name:    "no allowed set frees enough: nobody",
		cards:   2,
		holders: []draHolder{draHolderOf("h1", "j1", share("c0", wholeMiB, 100)), draHolderOf("h2", "j1", share("c1", wholeMiB, 100))},
		asks:    []draAsk{whole, whole},
		spare:   map[string]int{"j1": 1},
	}, {
		name:    "a job with nothing to spare gives nobody",
		cards:   1,
		holders: []draHolder{draHolderOf("h1", "j1", share("c0", wholeMiB, 100))},
		asks:    []draAsk{whole},
		spare:   map[string]int{"j1": 0},
	}, {
		name:    "a pod that holds no card here (another node's, or none: a CPU pod) is never chosen",
		cards:   1,
		holders: []draHolder{elsewhere, {ID: "cpu", Job: "j9"}, draHolderOf("h1", "j1", share("c0", 30000, 100))},
		asks:    []draAsk{{MemoryMiB: 1024, Cores: 10}},
		spare:   map[string]int{"j1": 1, "j9": 5},
		want:    []string{"h1"},
	}, {
		name:    "two requests of one claim may share a card",
		cards:   1,
		holders: []draHolder{draHolderOf("h1", "j1", share("c0", wholeMiB, 100))},
		asks:    []draAsk{{MemoryMiB: 10000, Cores: 40, Group: 0}, {MemoryMiB: 10000, Cores: 40, Group: 1}},
		spare:   map[string]int{"j1": 1},
		want:    []string{"h1"},
	}, {
		name:    "two cards of one request never share a card",
		cards:   1,
		holders: []draHolder{draHolderOf("h1", "j1", share("c0", wholeMiB, 100))},
		asks:    []draAsk{{MemoryMiB: 10000, Cores: 40}, {MemoryMiB: 10000, Cores: 40}},
		spare:   map[string]int{"j1": 1},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			picked, already := pickDRAVictims(cardsHeldBy(tt.cards, tt.holders...), tt.asks, tt.holders, tt.spare)
			var got []string
			for _, i := range picked {
				got = append(got, tt.holders[i].ID)
			}
			if !reflect.DeepEqual(got, tt.want) || already != tt.already {
				t.Errorf("victims %v (fits already %v), want %v (%v)", got, already, tt.want, tt.already)
			}
		})
	}
}

func TestClaimAsks(t *testing.T) {
	request := func(class string, count int64, capacity map[resourceapi.QualifiedName]string) resourceapi.DeviceRequest {
		r := util.BuildDeviceRequest("gpu", class, nil, nil, nil)
		if count > 0 {
			r.Exactly.Count = count
		}
		if capacity != nil {
			r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
			for k, v := range capacity {
				r.Exactly.Capacity.Requests[k] = resource.MustParse(v)
			}
		}
		return r
	}
	claim := func(reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		return util.BuildResourceClaim("ns", "c", reqs, nil, nil)
	}
	pair := request(dracost.Class, 2, map[resourceapi.QualifiedName]string{dracost.CapacityMemory: "4Gi", dracost.CapacityCores: "30"})
	for _, tt := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		want    []draAsk
		ok      bool
		errPart string
	}{
		{"a request that names no capacity asks for a whole card", claim(request(dracost.Class, 0, nil)),
			[]draAsk{{MemoryMiB: 0, Cores: 100, Group: 3}}, true, ""},
		{"count cards of the request's memory and cores, in the request's group", claim(pair),
			[]draAsk{{MemoryMiB: 4096, Cores: 30, Group: 3}, {MemoryMiB: 4096, Cores: 30, Group: 3}}, true, ""},
		{"another driver's request asks nothing of Tessera's cards", claim(request("gpu.example.com", 1, nil)), nil, false, ""},
		{"allocationMode All is not known before allocation", claim(func() resourceapi.DeviceRequest {
			r := request(dracost.Class, 0, nil)
			r.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
			return r
		}()), nil, true, "allocationMode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _, ok, err := claimAsks(tt.claim, 3)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("error %v, want one naming %s", err, tt.errPart)
				}
				return
			}
			if err != nil || ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("asks %v, ok %v, err %v; want %v, %v", got, ok, err, tt.want, tt.ok)
			}
		})
	}
}

// TestPickDRAVictimsProperties checks, on random nodes, holders and asks, against a
// brute force over every victim set and every placement of the asks: a victim set
// always makes the asks fit and is the smallest that does; no set is returned only
// when no allowed set fits; a holder without cards on the node, or beyond its job's
// spare, is never chosen.
func TestPickDRAVictimsProperties(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 3000; round++ {
		nCards := 1 + r.Intn(4)
		cards := cardsHeldBy(nCards)
		var holders []draHolder
		spare := map[string]int{}
		for i := 0; i < r.Intn(7); i++ {
			job := fmt.Sprintf("j%d", r.Intn(3))
			spare[job] = r.Intn(3)
			h := draHolder{ID: fmt.Sprintf("h%d", i), Job: job}
			if r.Intn(6) > 0 { // else a pod that holds no card: a CPU pod
				for k := 0; k < 1+r.Intn(2); k++ {
					c := &cards[r.Intn(nCards)]
					mib := min(c.CapacityMiB-c.UsedMiB, int64(256+r.Intn(wholeMiB)))
					cores := min(100-c.UsedCores, r.Intn(101))
					if mib <= 0 || containsCard(h.Cards, c.UUID) {
						continue
					}
					c.UsedMiB, c.UsedCores = c.UsedMiB+mib, c.UsedCores+cores
					h.Cards = append(h.Cards, share(c.UUID, mib, cores))
					h.Cost = h.Cost.Add(fairshare.Amount{MemoryMiB: float64(mib), Cores: float64(cores)})
				}
			}
			holders = append(holders, h)
		}
		var asks []draAsk
		for i := 0; i < 1+r.Intn(3); i++ {
			a := draAsk{MemoryMiB: int64(r.Intn(3) * 12000), Cores: r.Intn(101), Group: r.Intn(2)}
			asks = append(asks, a)
		}
		picked, already := pickDRAVictims(cards, asks, holders, spare)
		where := fmt.Sprintf("round %d: cards %+v holders %+v asks %+v spare %v -> %v (fits already %v)", round, cards, holders, asks, spare, picked, already)
		if already != bruteFits(cards, asks) {
			t.Fatalf("%s: fits already is %v, brute force says %v", where, already, !already)
		}
		if already {
			continue
		}
		taken := map[string]int{}
		for _, i := range picked {
			h := holders[i]
			if len(h.Cards) == 0 {
				t.Fatalf("%s: chose %s, which holds no card", where, h.ID)
			}
			if taken[h.Job]++; taken[h.Job] > spare[h.Job] {
				t.Fatalf("%s: took more of job %s than its spare", where, h.Job)
			}
		}
		if len(picked) > 0 && !bruteFits(release(cards, holders, picked), asks) {
			t.Fatalf("%s: the victims do not make the asks fit", where)
		}
		smallest := -1
		for mask := 1; mask < 1<<len(holders); mask++ {
			var set []int
			for i := range holders {
				if mask&(1<<i) != 0 {
					set = append(set, i)
				}
			}
			if !withinSpare(holders, set, spare) || !bruteFits(release(cards, holders, set), asks) {
				continue
			}
			if smallest < 0 || len(set) < smallest {
				smallest = len(set)
			}
		}
		switch {
		case smallest < 0 && len(picked) > 0:
			t.Fatalf("%s: no allowed set fits, yet victims were chosen", where)
		case smallest >= 0 && len(picked) == 0:
			t.Fatalf("%s: a set of %d fits, yet no victims were chosen", where, smallest)
		case smallest >= 0 && len(picked) != smallest:
			t.Fatalf("%s: chose %d victims where %d are enough", where, len(picked), smallest)
		}
	}
}

func containsCard(cs []api.CardAssignment, uuid string) bool {
	for _, c := range cs {
		if c.UUID == uuid {
			return true
		}
	}
	return false
}

func withinSpare(holders []draHolder, set []int, spare map[string]int) bool {
	taken := map[string]int{}
	for _, i := range set {
		if taken[holders[i].Job]++; taken[holders[i].Job] > spare[holders[i].Job] {
			return false
		}
	}
	return true
}

func release(cards []draCard, holders []draHolder, set []int) []draCard {
	var hs []draHolder
	for _, i := range set {
		hs = append(hs, holders[i])
	}
	return freed(cards, hs)
}

// bruteFits tries every card for every ask.
func bruteFits(cards []draCard, asks []draAsk) bool {
	choice := make([]int, len(asks))
	for {
		mib := make([]int64, len(cards))
		cores := make([]int, len(cards))
		seen := map[[2]int]bool{}
		ok := true
		for k, a := range asks {
			c := choice[k]
			need := a.MemoryMiB
			if need == 0 {
				need = cards[c].CapacityMiB
			}
			mib[c] += need
			cores[c] += a.Cores
			if seen[[2]int{a.Group, c}] {
				ok = false
			}
			seen[[2]int{a.Group, c}] = true
		}
		for i, c := range cards {
			if c.UsedMiB+mib[i] > c.CapacityMiB || c.UsedCores+cores[i] > 100 {
				ok = false
			}
		}
		if ok {
			return true
		}
		k := 0
		for k < len(choice) && choice[k] == len(cards)-1 {
			choice[k] = 0
			k++
		}
		if k == len(choice) {
			return false
		}
		choice[k]++
	}
}

// TestDRAFitsChecksTheSliceFirstCardAs134Does: with the slice's first card marked,
// draFits refuses what Kubernetes 1.34.2's allocator refuses (a request that does not
// also fit card-0's rest), so that the victims free card-0 where that is what the
// allocator needs.
func TestDRAFitsChecksTheSliceFirstCardAs134Does(t *testing.T) {
	whole := draAsk{Cores: 100}
	quarter := draAsk{MemoryMiB: wholeMiB / 4, Cores: 25}
	held := draHolderOf("a0", "j1", share("c0", wholeMiB, 100))
	for _, tt := range []struct {
		name       string
		sliceFirst bool
		asks       []draAsk
		want       bool
	}{
		{"without the mark a whole card fits an idle card beside a taken card-0", false, []draAsk{whole}, true},
		{"with it, a whole card fits nowhere once card-0 is taken", true, []draAsk{whole}, false},
		{"with it, a share fits nowhere once card-0 is taken whole", true, []draAsk{quarter}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cards := cardsHeldBy(3, held)
			cards[0].SliceFirst = tt.sliceFirst
			if got := draFits(cards, tt.asks); got != tt.want {
				t.Errorf("draFits = %v, want %v", got, tt.want)
			}
		})
	}
	// A share of card-0 leaves room for a share that also fits its rest, on any card.
	cards := cardsHeldBy(3, draHolderOf("s", "j1", share("c0", wholeMiB/2, 50)))
	cards[0].SliceFirst = true
	if !draFits(cards, []draAsk{quarter, quarter, quarter}) || draFits(cards, []draAsk{whole}) {
		t.Errorf("with half of card-0 taken: quarters should fit, a whole card should not")
	}
	// And the victim that frees card-0 is the one chosen, although card-1 and card-2 are idle.
	cards = cardsHeldBy(3, held)
	cards[0].SliceFirst = true
	if got, already := pickDRAVictims(cards, []draAsk{whole}, []draHolder{held}, map[string]int{"j1": 1}); already || len(got) != 1 {
		t.Errorf("pickDRAVictims = %v (fits already %v), want the holder of card-0", got, already)
	}
}
