package usage

import "k8s.io/klog/v2"

// CardUsage is what a container actually uses of one of its cards.
type CardUsage struct {
	// UsedBytes is the device memory its live processes hold.
	UsedBytes uint64
	// SMRatio is the share of the card's SMs it was charged over the limiter's last
	// period, 0..1 (briefly above 1 when launches overlap); Measured is false when the
	// card is not SM-limited (vgpu-core then times nothing) or no process is alive.
	SMRatio  float64
	Measured bool
	Capped   bool
}

// ContainerUsage is a container's region summed over its live processes.
type ContainerUsage struct {
	Cards     [MaxCards]CardUsage
	LiveProcs int
	DeadProcs int
}

// Summarise adds up the memory of the live processes of r. The region's own per-card
// totals are not used: they still hold a dead process's memory until a live process of
// the container reclaims it, which may be never.
func Summarise(r *Region, alive Liveness) ContainerUsage {
	var u ContainerUsage
	for _, p := range r.Procs {
		if !alive.Alive(p) {
			u.DeadProcs++
			continue
		}
		u.LiveProcs++
		for c, b := range p.Used {
			u.Cards[c].UsedBytes = addSat(u.Cards[c].UsedBytes, b)
		}
	}
	for c, card := range r.Cards {
		u.Cards[c].Capped = card.Capped && u.LiveProcs > 0
		if u.LiveProcs > 0 && card.ChargedNanos > 0 {
			u.Cards[c].SMRatio = float64(card.UtilPercent) / 100
			u.Cards[c].Measured = true
		}
	}
	return u
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// Sampler reads the regions of one scrape. The host's process table is read at most once,
// and only when some region has a registered process: the cost of a scrape is one scan of
// the host's processes plus, per container, its region's header and occupied slots.
type Sampler struct {
	procRoot  string
	hostPIDs  bool
	table     *ProcTable
	triedScan bool
}

// NewSampler returns a sampler for one scrape. seesHostPIDs says whether procRoot shows the
// containers' processes (SeesHostPIDs); when it does not, every registered process counts
// as alive.
func NewSampler(procRoot string, seesHostPIDs bool) *Sampler {
	return &Sampler{procRoot: procRoot, hostPIDs: seesHostPIDs}
}

// Container reads the region at path and sums it over its live processes.
func (s *Sampler) Container(path string) (ContainerUsage, *Region, error) {
	r, err := ReadFile(path)
	if err != nil {
		return ContainerUsage{}, nil, err
	}
	return Summarise(r, s.liveness(len(r.Procs) > 0)), r, nil
}

func (s *Sampler) liveness(needed bool) Liveness {
	if !s.hostPIDs || !needed {
		return AssumeAlive{}
	}
	if !s.triedScan {
		s.triedScan = true
		t, err := ScanProcs(s.procRoot)
		if err != nil {
			klog.ErrorS(err, "Usage: cannot read the host's processes; counting every registered process as alive")
		}
		s.table = t
	}
	if s.table == nil {
		return AssumeAlive{}
	}
	return s.table
}
