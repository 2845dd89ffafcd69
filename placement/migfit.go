package placement

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/api"
)

// Whole MIG instances (api.AnnotationMIGProfile). A pod that names a profile takes,
// for each vGPU container, as many free instances of exactly that profile as the
// container asks cards, on cards in MIG mode; a pod that names none never gets a card
// in MIG mode (ReasonMIG). An instance is free when no booking on the node names its
// MIG UUID: the node counts the holders of each MIG UUID (Node.mig) from the same
// Account, Reserve and Release calls that book cards, so running pods, assignments
// in flight and the session's own bookings all count alike. MIG bookings leave the
// card's Usage alone: the instance is the unit, and a card in MIG mode takes no share.

// Reasons a card gives a pod that asks for MIG instances.
const (
	// ReasonNotMIG: the pod asks for MIG instances and the card is not in MIG mode.
	ReasonNotMIG Reason = "not in MIG mode"
	// ReasonMIGLayout: the card is in MIG mode but its layout (api.AnnotationMIGInstances)
	// is absent or unreadable.
	ReasonMIGLayout Reason = "MIG layout unknown"
	// ReasonMIGNoProfile: the card has no instance of the profile.
	ReasonMIGNoProfile Reason = "no MIG instance of the profile"
	// ReasonMIGTaken: every instance of the profile on the card is taken.
	ReasonMIGTaken Reason = "no free MIG instance of the profile"
)

const (
	detailMIGLayout    detailKind = iota + 64
	detailMIGNoProfile            // text: the card's profiles
	detailMIGTaken                // a: instances of the profile, all taken
)

// migCand is a free instance: its card's index and its place in the card's layout.
type migCand struct{ card, inst int }

// MIGHolders is how many bookings name the MIG device: 0 when it is free, more
// than 1 only when existing pods were found sharing it.
func (n *Node) MIGHolders(migUUID string) int { return int(n.mig[migUUID]) }

// ForgetMIGHolders frees every MIG instance of the node: for the "would it fit an
// idle cluster" question.
func (n *Node) ForgetMIGHolders() { n.mig = nil }

// migInstance finds the MIG device on card c; -1 when the card's layout lacks it.
func migInstance(c *CardState, migUUID string) int {
	for i := range c.MIGInstances {
		if c.MIGInstances[i].UUID == migUUID {
			return i
		}
	}
	return -1
}

// checkMIGBooking says why an assignment's MIG device cannot be booked on card c now,
// also counting those this booking's earlier entries take.
func (n *Node) checkMIGBooking(c *CardState, a api.CardAssignment, also []string) error {
	switch {
	case !c.MIG:
		return fmt.Errorf("card %d (%s) on %s is not in MIG mode; MIG device %s cannot be booked", c.Index, c.UUID, n.Name, a.MIG)
	case migInstance(c, a.MIG) < 0:
		return fmt.Errorf("card %d (%s) on %s has no MIG device %s in its layout", c.Index, c.UUID, n.Name, a.MIG)
	case n.mig[a.MIG] > 0 || slices.Contains(also, a.MIG):
		return fmt.Errorf("MIG device %s of card %d (%s) on %s is taken", a.MIG, c.Index, c.UUID, n.Name)
	}
	return nil
}

// holdMIG counts one more holder of a MIG device and reports a device held twice or
// one the card's layout lacks (the booking counts anyway: an existing pod holds it).
func (n *Node) holdMIG(c *CardState, a api.CardAssignment) error {
	if n.mig == nil {
		n.mig = map[string]int32{}
	}
	n.mig[a.MIG]++
	switch {
	case n.mig[a.MIG] > 1:
		return fmt.Errorf("MIG device %s of card %d (%s) on %s is over-committed: %d holders", a.MIG, c.Index, c.UUID, n.Name, n.mig[a.MIG])
	case !c.MIG || migInstance(c, a.MIG) < 0:
		return fmt.Errorf("card %d (%s) on %s has no MIG device %s in its layout", c.Index, c.UUID, n.Name, a.MIG)
	}
	return nil
}

// releaseMIG drops one holder of a MIG device.
func (n *Node) releaseMIG(c *CardState, a api.CardAssignment) error {
	h := n.mig[a.MIG]
	switch {
	case h <= 0:
		return fmt.Errorf("card %d (%s) on %s: release of MIG device %s, which nothing holds", c.Index, c.UUID, n.Name, a.MIG)
	case h == 1:
		delete(n.mig, a.MIG)
	default:
		n.mig[a.MIG] = h - 1
	}
	return nil
}

// placeMIG is place for a pod that asks for whole MIG instances of one profile.
func placeMIG(n *Node, req *Request, build bool) (*Fit, *FitError) {
	profile := req.Options.MIGProfile
	// held counts each card's taken instances, this pod's earlier containers' included:
	// the card policy orders cards by it.
	held := n.migHeld()
	var mine []string
	fit := &Fit{Node: n.Name}
	if build {
		fit.Containers = make([]api.ContainerAssignment, 0, len(req.Containers))
	}
	took := 0
	for ci := range req.Containers {
		cr := &req.Containers[ci]
		cands, ferr := migCandidates(n, cr, req, mine)
		if ferr != nil {
			return nil, ferr
		}
		chosen := make([]migCand, cr.Cards)
		if req.Options.NUMABind && cr.Cards > 1 {
			if counts, ok := chooseMIGOneNUMA(n, cands, cr.Cards, req.CardPolicy, held, chosen); !ok {
				return nil, &FitError{Node: n.Name, Container: cr.Name, Wanted: cr.Cards, Fitting: len(cands), Cards: len(n.Cards),
					MIGProfile: profile, NUMA: counts}
			}
		} else {
			chooseMIG(cands, cr.Cards, req.CardPolicy, held, chosen)
		}
		var ca api.ContainerAssignment
		if build {
			ca = api.ContainerAssignment{Name: cr.Name, Cards: make([]api.CardAssignment, len(chosen))}
		}
		for i, m := range chosen {
			c := &n.Cards[m.card]
			in := &c.MIGInstances[m.inst]
			mine = append(mine, in.UUID)
			held[m.card]++
			took++
			if build {
				ca.Cards[i] = api.CardAssignment{UUID: c.UUID, MemoryMiB: in.MemoryMiB, Cores: 100, MIG: in.UUID}
			}
		}
		if build {
			fit.Containers = append(fit.Containers, ca)
		}
	}
	fit.Score = nodeScoreOf(nodeTerms{Policy: migNodeScore(n, took, req.NodePolicy)}, &req.Options.Weights, req.NodePolicy, 0)
	return fit, nil
}

// migHeld counts the taken instances of each card.
func (n *Node) migHeld() []int {
	held := make([]int, len(n.Cards))
	if len(n.mig) == 0 {
		return held
	}
	for i := range n.Cards {
		for _, in := range n.Cards[i].MIGInstances {
			if n.mig[in.UUID] > 0 {
				held[i]++
			}
		}
	}
	return held
}

// migCandidates lists the free instances of the pod's profile a container may take,
// cards by index and each card's instances in layout order, leaving out those in
// mine (taken by the pod's earlier containers). Too few is a *FitError.
func migCandidates(n *Node, cr *api.ContainerRequest, req *Request, mine []string) ([]migCand, *FitError) {
	profile := req.Options.MIGProfile
	idleOnly := req.CardPolicy == api.PolicyIdleOnly
	var cands []migCand
	var rejects []CardReject
	busy := 0
	for i := range n.Cards {
		c := &n.Cards[i]
		var r CardReject
		free, total, others := migFree(n, c, profile, mine)
		switch {
		case checkMIGCard(c, &req.Options, &r):
		case idleOnly && others > 0:
			r = CardReject{Index: c.Index, UUID: c.UUID, Reason: ReasonInUse, why: rejectDetail{kind: detailInUse, a: int64(others)}}
			busy += total
		case total == 0:
			r = CardReject{Index: c.Index, UUID: c.UUID, Reason: ReasonMIGNoProfile,
				why: rejectDetail{kind: detailMIGNoProfile, text: profilesOf(c)}}
		case len(free) == 0:
			r = CardReject{Index: c.Index, UUID: c.UUID, Reason: ReasonMIGTaken, why: rejectDetail{kind: detailMIGTaken, a: int64(total)}}
			busy += total
		default:
			for _, j := range free {
				cands = append(cands, migCand{card: i, inst: j})
			}
			busy += total - len(free)
			continue
		}
		rejects = append(rejects, r)
	}
	if len(cands) < cr.Cards {
		return nil, &FitError{Node: n.Name, Container: cr.Name, Wanted: cr.Cards, Fitting: len(cands), Cards: len(n.Cards),
			Rejects: rejects, MIGProfile: profile, MIGBusy: busy}
	}
	return cands, nil
}

// migFree lists the free instances of profile on card c (indices into its layout),
// counts its instances of the profile, and counts its instances other pods hold.
func migFree(n *Node, c *CardState, profile string, mine []string) (free []int, total, others int) {
	for j := range c.MIGInstances {
		in := &c.MIGInstances[j]
		taken := n.mig[in.UUID] > 0
		if taken {
			others++
		}
		if in.Profile != profile {
			continue
		}
		total++
		if !taken && !slices.Contains(mine, in.UUID) {
			free = append(free, j)
		}
	}
	return free, total, others
}

// checkMIGCard applies the fixed filters for a MIG request, in the order checkCard
// applies them, and reports whether the card refuses.
func checkMIGCard(c *CardState, o *api.PodOptions, r *CardReject) bool {
	reject := func(reason Reason, d rejectDetail) bool {
		*r = CardReject{Index: c.Index, UUID: c.UUID, Reason: reason, why: d}
		return true
	}
	switch {
	case !c.Healthy:
		return reject(ReasonUnhealthy, rejectDetail{})
	case c.Cordon != nil:
		return reject(ReasonCordoned, rejectDetail{kind: detailCordoned, text: c.Cordon.Reason})
	case !c.MIG:
		return reject(ReasonNotMIG, rejectDetail{})
	}
	if reason, d, refused := checkFilters(c.UUID, c.Model, o); refused {
		return reject(reason, d)
	}
	if c.MIGInstances == nil {
		return reject(ReasonMIGLayout, rejectDetail{kind: detailMIGLayout})
	}
	return false
}

// profilesOf lists a card's instances by profile, e.g. "1g.10gb×2, 3g.40gb".
func profilesOf(c *CardState) string {
	counts := map[string]int{}
	for _, in := range c.MIGInstances {
		counts[in.Profile]++
	}
	if len(counts) == 0 {
		return "none"
	}
	names := make([]string, 0, len(counts))
	for p := range counts {
		names = append(names, p)
	}
	sort.Strings(names)
	for i, p := range names {
		if counts[p] > 1 {
			names[i] = p + "×" + strconv.Itoa(counts[p])
		}
	}
	return strings.Join(names, ", ")
}

// chooseMIG takes k of the candidates, one at a time: binpack (and every policy but
// spread) the free instance on the card with the most taken instances, spread the one
// on the card with the fewest, counting the instances already chosen; ties go to the
// lower card index and the earlier instance. held is not changed.
func chooseMIG(cands []migCand, k int, p api.Policy, held []int, out []migCand) {
	h := append([]int(nil), held...)
	used := make([]bool, len(cands))
	for step := 0; step < k; step++ {
		best := -1
		for c, m := range cands {
			if used[c] {
				continue
			}
			if best < 0 || migBetter(h[m.card], h[cands[best].card], p) {
				best = c
			}
		}
		used[best] = true
		out[step] = cands[best]
		h[cands[best].card]++
	}
}

// migBetter orders cards by their taken instances for policy p.
func migBetter(held, bestHeld int, p api.Policy) bool {
	if p == api.PolicySpread {
		return held < bestHeld
	}
	return held > bestHeld
}

// chooseMIGOneNUMA is chooseMIG within one known NUMA node (api.AnnotationNUMABind):
// the NUMA node of the instance the policy would take first, if it has k
// candidates, else the lowest-numbered one that has. ok is false when none has k;
// counts then says how many each has.
func chooseMIGOneNUMA(n *Node, cands []migCand, k int, p api.Policy, held []int, out []migCand) (counts string, ok bool) {
	per := map[int]int{}
	unknown := 0
	for _, m := range cands {
		if v := n.Cards[m.card].NUMA; v >= 0 {
			per[v]++
		} else {
			unknown++
		}
	}
	var first [1]migCand
	chooseMIG(cands, 1, p, held, first[:])
	pick := -1
	if v := n.Cards[first[0].card].NUMA; v >= 0 && per[v] >= k {
		pick = v
	} else {
		for v, c := range per {
			if c >= k && (pick < 0 || v < pick) {
				pick = v
			}
		}
	}
	if pick < 0 {
		keys := make([]int, 0, len(per))
		for v := range per {
			keys = append(keys, v)
		}
		sort.Ints(keys)
		var parts []string
		for _, v := range keys {
			parts = append(parts, "node "+strconv.Itoa(v)+": "+strconv.Itoa(per[v]))
		}
		if unknown > 0 {
			parts = append(parts, "unknown: "+strconv.Itoa(unknown))
		}
		return strings.Join(parts, ", "), false
	}
	group := make([]migCand, 0, per[pick])
	for _, m := range cands {
		if n.Cards[m.card].NUMA == pick {
			group = append(group, m)
		}
	}
	chooseMIG(group, k, p, held, out)
	return "", true
}

// migNodeScore rates a node for a MIG request by the share of its known MIG
// instances taken once the pod's took more are: binpack favours the fuller node,
// spread the emptier, 0..100.
func migNodeScore(n *Node, took int, p api.Policy) float64 {
	total, taken := 0, took
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.Healthy || !c.MIG {
			continue
		}
		total += len(c.MIGInstances)
		for _, in := range c.MIGInstances {
			if n.mig[in.UUID] > 0 {
				taken++
			}
		}
	}
	if total == 0 {
		return 0
	}
	u := min(1, float64(taken)/float64(total))
	if p == api.PolicySpread {
		return 100 * (1 - u)
	}
	return 100 * u
}

// migError is FitError.Error for a MIG request.
func (e *FitError) migError() string {
	if e.NUMA != "" {
		return fmt.Sprintf("container %q needs %d MIG instances of profile %s on one NUMA node (%s=true), %d are free but not on one node (%s)",
			e.Container, e.Wanted, e.MIGProfile, api.AnnotationNUMABind, e.Fitting, e.NUMA)
	}
	s := fmt.Sprintf("container %q needs %d MIG instances of profile %s, %d free and %d taken on the node",
		e.Container, e.Wanted, e.MIGProfile, e.Fitting, e.MIGBusy)
	if e.Fitting == 0 {
		s = fmt.Sprintf("no free MIG instance of profile %s for container %q (needs %d; %d taken on the node)",
			e.MIGProfile, e.Container, e.Wanted, e.MIGBusy)
	}
	if len(e.Rejects) > 0 {
		s += "; cards: " + e.histogram()
	}
	return s
}

// migExplain is CardReject.Explain for the MIG reasons.
func migExplain(d rejectDetail) (string, bool) {
	switch d.kind {
	case detailMIGLayout:
		return "annotation " + api.AnnotationMIGInstances + " is absent or unreadable; no instance of the card is handed out", true
	case detailMIGNoProfile:
		return "the card's instances: " + d.text, true
	case detailMIGTaken:
		return itoa(d.a) + " of " + itoa(d.a) + " taken", true
	}
	return "", false
}
