package fairshare

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/api"
)

// Cards is what the queue shares know of the cards they divide, to charge a pod for
// what it takes from the other queues. A pod that shares its cards is charged what it
// asks of each; a pod that holds its cards alone (api.PolicyIdleOnly: no other pod may
// join them) is charged each card whole, the card's schedulable memory and 100 cores,
// since all of it leaves the supply the other queues share (book.Ledger.CardTotals
// counts each card's schedulable memory and 100 cores). Charging such a pod what it
// asks would let a queue take whole cards at the price of 1 MiB and 1 core each.
//
// A card's CUDA context reserve does not change the charge: it is counted inside each
// container's memory limit, not taken off the card's capacity.
type Cards struct {
	// RefMiB is the mean card's memory: a percentage of memory is costed on it before
	// the card is chosen.
	RefMiB int64
	// WholeMiB is the mean card's schedulable memory (RefMiB times the memory
	// oversubscription): what a pod that will hold its cards alone is charged per card
	// before they are chosen, and per card the book does not know once placed.
	WholeMiB int64
	// CapacityMiB returns a card's schedulable memory by UUID, false for a card the
	// book does not know; nil knows none.
	CapacityMiB func(uuid string) (int64, bool)
	// InstanceSlices returns the compute slices of a MIG device by its UUID ("MIG-..."),
	// read off its profile in the card's layout, false for a device the book does not
	// know; nil knows none. An instance it does not know counts one slice, the least
	// any instance takes.
	InstanceSlices func(mig string) (float64, bool)
}

// Requested is what containers ask of the cluster before their cards are chosen.
// A memory percentage is costed on a card of RefMiB, the mean card size, since the
// card it will land on is not known yet. A pod that asks for idle cards only
// (idleOnly) is charged, per card it asks for, a whole card: WholeMiB (or what it asks,
// if more) and 100 cores. Containers of one pod may share a card, so for a pod of
// several containers this may be more than it will hold; once placed it is charged
// what it holds (Assigned).
//
// Whole MIG instances are charged in a dimension of their own, MIG slices: Cards
// instances of the profile's compute slices each (MIGSlices; "3g.40gb" is 3), and no
// card memory or cores. Cards in MIG mode add their compute slices to that supply only
// (book.Ledger.CardTotals), never to card memory and cores: counted in one pool with
// whole and shared cards, they would give each queue a share of capacity only MIG pods
// can use, and a queue of card pods would be reclaimed down to a share it can never
// fill (e2e TestReclaimGivesTheLateQueueItsShareOfCards fails that way).
func (k Cards) Requested(cs []api.ContainerRequest, idleOnly bool) Amount {
	var a Amount
	for _, c := range cs {
		if c.MIGProfile != "" {
			// The profile was checked when the request was read (api.ParsePodRequest
			// refuses a name that is not "<N>g.<GB>gb"); one that does not parse here
			// counts the least an instance takes.
			n, err := MIGSlices(c.MIGProfile)
			if err != nil {
				n = 1
			}
			a.MIGSlices += float64(c.Cards) * n
			continue
		}
		mem, cores := c.MemoryMiB, int64(c.Cores)
		if mem == 0 {
			mem = max(1, k.RefMiB*int64(c.MemoryPercent)/100)
		}
		if idleOnly {
			mem, cores = max(mem, k.WholeMiB), 100
		}
		a.MemoryMiB += float64(int64(c.Cards) * mem)
		a.Cores += float64(int64(c.Cards) * cores)
	}
	return a
}

// Assigned is what an assignment holds: exact, from the chosen cards; a whole MIG
// instance holds its profile's compute slices (InstanceSlices) and no card memory or
// cores (see Requested). A pod that holds its cards alone (idleOnly)
// is charged each card once, however many of its containers share it: the card's
// schedulable memory (CapacityMiB; WholeMiB for a card the book does not know; never
// less than what its containers were assigned there) and 100 cores.
func (k Cards) Assigned(cs []api.ContainerAssignment, idleOnly bool) Amount {
	var a Amount
	var whole map[string]int64 // idle-only: what the pod's containers were assigned on each card
	for _, c := range cs {
		for _, card := range c.Cards {
			switch {
			case card.IsMIG():
				a.MIGSlices += k.instanceSlices(card.MIG)
			case idleOnly:
				if whole == nil {
					whole = map[string]int64{}
				}
				whole[card.UUID] += card.MemoryMiB
			default:
				a.MemoryMiB += float64(card.MemoryMiB)
				a.Cores += float64(card.Cores)
			}
		}
	}
	for uuid, assigned := range whole {
		capacity, known := k.capacity(uuid)
		if !known {
			capacity = k.WholeMiB
		}
		a.MemoryMiB += float64(max(capacity, assigned))
		a.Cores += 100
	}
	return a
}

func (k Cards) capacity(uuid string) (int64, bool) {
	if k.CapacityMiB == nil {
		return 0, false
	}
	return k.CapacityMiB(uuid)
}

func (k Cards) instanceSlices(mig string) float64 {
	if k.InstanceSlices != nil {
		if n, ok := k.InstanceSlices(mig); ok {
			return n
		}
	}
	return 1
}

// MIGSlices is the number of compute slices of a MIG profile: the leading N of
// "<N>g.<GB>gb", with or without a media-engine suffix ("1g.10gb+me" is 1).
func MIGSlices(profile string) (float64, error) {
	g, _, ok := strings.Cut(profile, "g.")
	n, err := strconv.Atoi(g)
	if !ok || err != nil || n < 1 || g[0] < '1' || g[0] > '9' {
		return 0, fmt.Errorf("MIG profile %q does not start with its compute slices, as in 3g.40gb", profile)
	}
	return float64(n), nil
}

// CardMIGSlices is the compute slices a card in MIG mode adds to the MIG supply: the
// slices of the GPU instances its layout holds now (each GPU instance once, however
// many compute instances it is split into), since only those can be handed to pods.
// A card whose layout leaves slices unused (two 3g.40gb on a seven-slice H100) adds
// what the instances hold, 6, not the card's 7: counting slices no pod can take would
// give every queue a MIG share it can never reach, so no queue would ever be held to
// it. A re-partitioned card adds its new layout's slices from the next session on.
// Zero for a card not in MIG mode or whose layout is unknown.
func CardMIGSlices(c api.Card) float64 {
	if !c.MIG {
		return 0
	}
	sum, seen := 0.0, map[int]bool{}
	for _, in := range c.MIGInstances {
		if seen[in.GI] {
			continue
		}
		seen[in.GI] = true
		if n, err := MIGSlices(in.Profile); err == nil {
			sum += n
		}
	}
	return sum
}
