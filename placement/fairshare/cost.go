package fairshare

import (
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/api"
)

// Requested is what containers ask of the cluster before their cards are chosen.
// A memory percentage is costed on a card of refMiB, the mean card size, since
// the card it will land on is not known yet.
// A container asking for whole MIG instances is costed by its profile (MIGCost).
func Requested(cs []api.ContainerRequest, refMiB int64) Amount {
	var a Amount
	for _, c := range cs {
		if c.MIGProfile != "" {
			mem, cores := MIGCost(c.MIGProfile)
			a.MemoryMiB += float64(c.Cards) * mem
			a.Cores += float64(c.Cards) * cores
			continue
		}
		mem := c.MemoryMiB
		if mem == 0 {
			mem = max(1, refMiB*int64(c.MemoryPercent)/100)
		}
		a.MemoryMiB += float64(int64(c.Cards) * mem)
		a.Cores += float64(c.Cards * c.Cores)
	}
	return a
}

// Assigned is what an assignment holds: exact, from the chosen cards. A whole MIG
// instance holds its memory and, of the cores, its profile's share of the card
// (MIGCost); migProfile is the pod's api.AnnotationMIGProfile, and where it does not
// read as a profile an instance counts the whole card's cores.
func Assigned(cs []api.ContainerAssignment, migProfile string) Amount {
	var a Amount
	_, migCores := MIGCost(migProfile)
	if migCores == 0 {
		migCores = 100
	}
	for _, c := range cs {
		for _, card := range c.Cards {
			a.MemoryMiB += float64(card.MemoryMiB)
			if card.IsMIG() {
				a.Cores += migCores
				continue
			}
			a.Cores += float64(card.Cores)
		}
	}
	return a
}

// MIGCost is what one MIG instance of profile counts for in a queue, before and
// after placement alike: its memory as the name gives it (GB as GiB, e.g. 40 GB for
// 3g.40gb is 40960 MiB; the instance's exact memory replaces it once placed) and, of
// the card's cores, its compute slices out of the seven a card has (3g: 300/7 %).
// Compute slices rather than memory slices, because cores are what the name counts
// and what sizes a job's throughput. Zero for a name that is not a profile.
func MIGCost(profile string) (memoryMiB, cores float64) {
	base, _, _ := strings.Cut(profile, "+")
	base, _, _ = strings.Cut(base, "-")
	g, mem, ok := strings.Cut(base, "g.")
	if !ok {
		return 0, 0
	}
	slices, err1 := strconv.Atoi(g)
	gb, err2 := strconv.Atoi(strings.TrimSuffix(mem, "gb"))
	if err1 != nil || err2 != nil || slices < 1 || gb < 1 || !strings.HasSuffix(mem, "gb") {
		return 0, 0
	}
	return float64(gb) * 1024, 100 * float64(min(slices, migComputeSlices)) / migComputeSlices
}

// migComputeSlices is how many compute slices a MIG-capable card has (A100, H100, B200).
const migComputeSlices = 7
