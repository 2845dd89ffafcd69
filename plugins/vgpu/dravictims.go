package vgpu

import (
	"sort"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// Victims for a task whose pod uses ResourceClaims of Tessera's DRA driver: on a DRA
// node, the fewest DRA pods whose claims, freed, let the task's claims fit the node's
// cards (per card memory and cores, from the card book). This file is the pure part:
// cards, asks and holders in, indices out. dravictims_session.go feeds it from the
// session.

// draAsk is one card a pending claim asks for: MemoryMiB of its memory (0: all of
// it, the driver's default, so a whole card) and Cores percent of its SMs. The cards
// of one request (Group) must differ: the node agent refuses one card twice in a claim.
type draAsk struct {
	MemoryMiB int64
	Cores     int
	Group     int
}

// draCard is a card of a DRA node that takes claims: its memory and what the claims on
// it consume. SliceFirst marks the first device of the node's ResourceSlice (card-0):
// Kubernetes 1.34.2's allocator checks a request's capacity against that card's rest as
// well as against the card it tries (docs/dra.md, "Known defect";
// TestAllocator134ChecksTheWrongCardsCapacity in deviceplugin/dra), so once card-0 is
// taken a whole card fits nowhere on the node, idle cards or not.
type draCard struct {
	UUID        string
	CapacityMiB int64
	UsedMiB     int64
	UsedCores   int
	SliceFirst  bool
}

// draHolder is a candidate victim: the cards its claims hold on the node, the job it
// belongs to (Job), what evicting it takes from its queue (Cost) and a name that
// breaks ties (ID), so that the choice does not depend on the order of candidates.
type draHolder struct {
	Cards []api.CardAssignment
	Job   string
	Cost  fairshare.Amount
	ID    string
}

// maxDRAVictimTries bounds the victim sets pickDRAVictims tries in order of size; past
// it, it takes the cheapest holders one by one until the asks fit (still a set that
// fits, perhaps not the fewest).
const maxDRAVictimTries = 4096

// pickDRAVictims returns the indices (into holders) of the fewest holders whose cards,
// freed, make every ask fit the cards; among sets of one size, the cheapest holders
// first. A job gives at most spare[job] of its holders (a job missing from spare gives
// none); a holder that holds none of the cards is never chosen. fitsAlready is true,
// with no victims, when the asks fit without evicting anyone; victims is empty when no
// allowed set frees enough.
func pickDRAVictims(cards []draCard, asks []draAsk, holders []draHolder, spare map[string]int) (victims []int, fitsAlready bool) {
	if draFits(cards, asks) {
		return nil, true
	}
	byUUID := make(map[string]int, len(cards))
	for i, c := range cards {
		byUUID[c.UUID] = i
	}
	var useful []int
	for i, h := range holders {
		if spare[h.Job] <= 0 {
			continue
		}
		for _, c := range h.Cards {
			if _, ok := byUUID[c.UUID]; ok {
				useful = append(useful, i)
				break
			}
		}
	}
	sort.SliceStable(useful, func(a, b int) bool {
		ha, hb := holders[useful[a]], holders[useful[b]]
		if fairshare.Smaller(ha.Cost, hb.Cost) || fairshare.Smaller(hb.Cost, ha.Cost) {
			return fairshare.Smaller(ha.Cost, hb.Cost)
		}
		return ha.ID < hb.ID
	})
	fitsWithout := func(set []int) bool {
		free := append([]draCard(nil), cards...)
		for _, i := range set {
			for _, c := range holders[i].Cards {
				if j, ok := byUUID[c.UUID]; ok {
					free[j].UsedMiB -= c.MemoryMiB
					free[j].UsedCores -= c.Cores
				}
			}
		}
		return draFits(free, asks)
	}
	allowed := func(set []int) bool {
		taken := map[string]int{}
		for _, i := range set {
			taken[holders[i].Job]++
			if taken[holders[i].Job] > spare[holders[i].Job] {
				return false
			}
		}
		return true
	}
	tries := 0
	for size := 1; size <= len(useful) && tries < maxDRAVictimTries; size++ {
		var found []int
		eachCombination(len(useful), size, func(pick []int) bool {
			tries++
			set := make([]int, len(pick))
			for k, p := range pick {
				set[k] = useful[p]
			}
			if allowed(set) && fitsWithout(set) {
				found = set
				return false
			}
			return tries < maxDRAVictimTries
		})
		if found != nil {
			return found, false
		}
	}
	// Too many sets to try: the cheapest holders, one by one, within each job's spare.
	var set []int
	taken := map[string]int{}
	for _, i := range useful {
		if taken[holders[i].Job] >= spare[holders[i].Job] {
			continue
		}
		taken[holders[i].Job]++
		set = append(set, i)
		if fitsWithout(set) {
			return set, false
		}
	}
	return nil, false
}

// eachCombination calls fn with every k-subset of 0..n-1 in lexicographic order (as
// ascending indices) until fn returns false.
func eachCombination(n, k int, fn func([]int) bool) {
	if k > n || k <= 0 {
		return
	}
	pick := make([]int, k)
	for i := range pick {
		pick[i] = i
	}
	for {
		if !fn(pick) {
			return
		}
		i := k - 1
		for i >= 0 && pick[i] == n-k+i {
			i--
		}
		if i < 0 {
			return
		}
		pick[i]++
		for j := i + 1; j < k; j++ {
			pick[j] = pick[j-1] + 1
		}
	}
}

// draFits reports whether every ask finds a card with the memory and cores it needs
// still free (and, for a card after the SliceFirst one, free on that one too), the asks
// of one group on different cards. It tries every assignment
// (largest asks first), which is cheap at the sizes of a node.
func draFits(cards []draCard, asks []draAsk) bool {
	if len(asks) == 0 {
		return true
	}
	order := append([]draAsk(nil), asks...)
	sort.SliceStable(order, func(a, b int) bool {
		ma, mb := order[a].MemoryMiB, order[b].MemoryMiB
		if (ma == 0) != (mb == 0) {
			return ma == 0 // whole cards first: they need an idle card
		}
		if ma != mb {
			return ma > mb
		}
		return order[a].Cores > order[b].Cores
	})
	freeMiB := make([]int64, len(cards))
	freeCores := make([]int, len(cards))
	first := -1
	for i, c := range cards {
		freeMiB[i], freeCores[i] = c.CapacityMiB-c.UsedMiB, 100-c.UsedCores
		if c.SliceFirst {
			first = i
		}
	}
	used := map[[2]int]bool{} // (group, card) already taken by the group
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(order) {
			return true
		}
		a := order[k]
		for i, c := range cards {
			need := a.MemoryMiB
			if need == 0 {
				need = c.CapacityMiB
			}
			if used[[2]int{a.Group, i}] || freeMiB[i] < need || freeCores[i] < a.Cores {
				continue
			}
			if first >= 0 && i != first && (freeMiB[first] < need || freeCores[first] < a.Cores) {
				continue // the 1.34.2 allocator's check of the slice's first card
			}
			freeMiB[i] -= need
			freeCores[i] -= a.Cores
			used[[2]int{a.Group, i}] = true
			if place(k + 1) {
				return true
			}
			freeMiB[i] += need
			freeCores[i] += a.Cores
			delete(used, [2]int{a.Group, i})
		}
		return false
	}
	return place(0)
}

// claimAsks is what an unallocated claim asks of Tessera's cards, one draAsk per card
// of every request of the class (dracost.CardRequests reads them), the cards of request
// i in group firstGroup+i. ok is false when no request names the class; err names the
// field of a request whose cards are not known before allocation.
func claimAsks(claim *resourceapi.ResourceClaim, firstGroup int) (asks []draAsk, groups int, ok bool, err error) {
	reqs, ok, err := dracost.CardRequests(claim)
	if err != nil || !ok {
		return nil, 0, ok, err
	}
	for i, r := range reqs {
		for n := int64(0); n < r.Count; n++ {
			asks = append(asks, draAsk{MemoryMiB: r.MemoryMiB, Cores: int(r.Cores), Group: firstGroup + i})
		}
	}
	return asks, len(reqs), true, nil
}
