package placement

import (
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/tessera-gpu/tessera/api"
)

// Request is one pod's vGPU demand with its user options resolved.
type Request struct {
	Containers []api.ContainerRequest
	Options    api.PodOptions
	// CardPolicy and NodePolicy are the effective policies: the pod's override or
	// the plugin's default.
	CardPolicy api.Policy
	NodePolicy api.Policy
	// TopologyWeight scales the link quality of multi-card containers (0..100) added
	// to the node score on nodes with a link matrix; 0 leaves node scores link-blind.
	// The pod's Options.Weights override it and weigh the other terms (weights.go).
	TopologyWeight float64
	// GangSize is the pod's gang's minimum member count. A single-card member of a
	// larger gang is scored by the links from its card to the node's idle cards,
	// where its peers will likely land: a gang of eight one-card workers then
	// gathers on an NVLink island, not on whichever node came first.
	GangSize int
}

// Fit is a feasible placement of a pod on a node.
type Fit struct {
	Node       string
	Containers []api.ContainerAssignment
	// Score is the node's score for this pod, higher is better: 0..100 from the
	// node policy, plus TopologyWeight × 0..100 link quality on nodes with links;
	// the pod's weights change the mix (nodeScoreOf).
	Score float64
}

// FitPod chooses cards for every container of the request on node n, containers in
// order, each seeing the cards the earlier ones took. It does not change n. On
// failure it returns a *FitError naming the container and, per card, the limit that
// failed.
func FitPod(n *Node, req *Request) (*Fit, *FitError) {
	return place(n, req, true)
}

// ScorePod is FitPod without building the assignment: the node's score for the
// pod, or why it does not fit. Predicates call it for every node.
func ScorePod(n *Node, req *Request) (float64, *FitError) {
	f, ferr := place(n, req, false)
	if ferr != nil {
		return 0, ferr
	}
	return f.Score, nil
}

func place(n *Node, req *Request, build bool) (*Fit, *FitError) {
	if req.Options.MIGProfile != "" {
		return placeMIG(n, req, build)
	}
	// A pod that weighs the terms sees the node's pair weights scaled for card choice.
	w := &req.Options.Weights
	if w.Any() {
		n = n.weighed(w.Of(api.TermTopology, 1), w.Of(api.TermNUMA, 1))
	}
	// The NUMA term of the node score is computed only for a pod that weighs it.
	numaWeighed := w.Of(api.TermNUMA, 0) > 0
	tenancy := req.Tenancy()
	// extra is what earlier containers of this pod took, per card; allocated only
	// once a container has been placed, so the common one-container pod and every
	// refusal cost no copy of the node.
	var extra []Usage
	var grades, locality float64
	multi, local := 0, 0
	fit := &Fit{Node: n.Name}
	if build {
		fit.Containers = make([]api.ContainerAssignment, 0, len(req.Containers))
	}
	for ci := range req.Containers {
		cr := &req.Containers[ci]
		chosen, ferr := fitContainer(n, extra, cr, req)
		if ferr != nil {
			return nil, ferr
		}
		if extra == nil {
			extra = make([]Usage, len(n.Cards))
		}
		var ca api.ContainerAssignment
		if build {
			ca = api.ContainerAssignment{Name: cr.Name, Cards: make([]api.CardAssignment, len(chosen))}
		}
		for i, idx := range chosen {
			c := &n.Cards[idx]
			mem := memoryFor(&c.Card, cr)
			if build {
				ca.Cards[i] = api.CardAssignment{UUID: c.UUID, MemoryMiB: mem, Cores: cr.Cores}
			}
			extra[idx].add(tenantUsage(api.CardAssignment{MemoryMiB: mem, Cores: cr.Cores}, tenancy))
		}
		if len(chosen) > 1 && n.topo != nil {
			grades += n.topo.setGrade(chosen)
			multi++
		}
		if len(chosen) > 1 && numaWeighed {
			locality += numaGrade(n, chosen)
			local++
		}
		if build {
			fit.Containers = append(fit.Containers, ca)
		}
	}
	policy := nodeScore(n, extra, req.NodePolicy)
	if multi == 0 && req.GangSize > 1 && n.topo != nil && len(req.Containers) == 1 && req.Containers[0].Cards == 1 {
		if c, ok := onlyCard(extra); ok {
			grades, multi = n.topo.peerGrade(n, c, req.GangSize-1), 1
		}
	}
	t := nodeTerms{Policy: policy}
	if multi > 0 {
		t.Links, t.HasLinks = grades/float64(multi), true
	}
	if local > 0 {
		t.NUMA, t.HasNUMA = locality/float64(local), true
	}
	fit.Score = nodeScoreOf(t, w, req.NodePolicy, req.TopologyWeight)
	return fit, nil
}

// onlyCard is the one card extra books.
func onlyCard(extra []Usage) (int, bool) {
	for i := range extra {
		if extra[i].Tenants > 0 {
			return i, true
		}
	}
	return 0, false
}

type candidate struct {
	idx   int
	score float64
}

// usedWith is a card's usage plus what earlier containers of the pod took.
func usedWith(n *Node, extra []Usage, i int) Usage {
	u := n.Cards[i].Used
	if extra != nil {
		u.add(extra[i])
	}
	return u
}

func fitContainer(n *Node, extra []Usage, cr *api.ContainerRequest, req *Request) ([]int, *FitError) {
	var buf [16]candidate
	cands := buf[:0]
	var rejects []CardReject
	var r CardReject
	idleOnly := req.CardPolicy == api.PolicyIdleOnly
	weight := req.Options.Weights.Of(api.TermPolicy, 1)
	for i := range n.Cards {
		c := &n.Cards[i]
		used := usedWith(n, extra, i)
		if checkCard(c, used, cr, &req.Options, idleOnly, &r) || checkQoS(c, used, cr, &req.Options, &r) {
			if rejects == nil {
				rejects = make([]CardReject, 0, len(n.Cards)-i)
			}
			rejects = append(rejects, r)
			continue
		}
		cands = append(cands, candidate{idx: i, score: weight * cardScore(c, used, memoryFor(&c.Card, cr), cr.Cores, req.CardPolicy)})
	}
	if len(cands) < cr.Cards {
		return nil, &FitError{Node: n.Name, Container: cr.Name, Wanted: cr.Cards, Fitting: len(cands), Cards: len(n.Cards), Rejects: rejects}
	}
	out := make([]int, cr.Cards)
	if req.Options.NUMABind && cr.Cards > 1 {
		if ok, counts := chooseOneNUMA(n, cands, cr.Cards, out); !ok {
			return nil, &FitError{Node: n.Name, Container: cr.Name, Wanted: cr.Cards, Fitting: len(cands), Cards: len(n.Cards), Rejects: rejects, NUMA: counts}
		}
		return out, nil
	}
	choose(n, cands, cr.Cards, req.CardPolicy, req.Options.Weights.Of(api.TermNUMA, 1) > 0, out)
	return out, nil
}

// memoryFor is the MiB a container takes on a card: its fixed amount, or its
// percentage of the card's physical memory (at least 1 MiB).
func memoryFor(c *api.Card, cr *api.ContainerRequest) int64 {
	if cr.MemoryMiB > 0 {
		return cr.MemoryMiB
	}
	return max(1, c.MemoryMiB*int64(cr.MemoryPercent)/100)
}

// checkCard applies the hard filters, cheapest and most permanent first, against
// the card's usage used, and reports whether the card refuses; the refusal goes to
// r with its figures, not its text (CardReject.Explain). idleOnly is whether the pod
// asks for idle cards only.
func checkCard(c *CardState, used Usage, cr *api.ContainerRequest, o *api.PodOptions, idleOnly bool, r *CardReject) bool {
	reject := func(reason Reason, d rejectDetail) bool {
		*r = CardReject{Index: c.Index, UUID: c.UUID, Reason: reason, why: d}
		return true
	}
	switch {
	case !c.Healthy:
		return reject(ReasonUnhealthy, rejectDetail{})
	case c.Cordon != nil:
		return reject(ReasonCordoned, rejectDetail{kind: detailCordoned, text: c.Cordon.Reason})
	}
	if reason, d, refused := checkFilters(c.UUID, c.Model, o); refused {
		return reject(reason, d)
	}
	// After the pod's own filters: a card in MIG mode that the pod's filters exclude
	// anyway is not one it aims at (the reason reported is the aimed-at node's).
	if c.MIG {
		return reject(ReasonMIG, rejectDetail{})
	}
	mem := memoryFor(&c.Card, cr)
	switch {
	case mem < c.ContextReserveMiB:
		// Every CUDA context is counted inside the container's limit on the card
		// (vgpu-core's TESSERA_CONTEXT_RESERVE_MIB): below the reserve the container
		// would start and then fail its first cuInit.
		pct := int64(0)
		if cr.MemoryMiB == 0 {
			pct = int64(cr.MemoryPercent)
		}
		return reject(ReasonContextReserve, rejectDetail{kind: detailContextReserve, a: mem, b: c.ContextReserveMiB, c: pct})
	case mem > c.CapacityMiB:
		return reject(ReasonTooSmall, rejectDetail{kind: detailTooSmall, a: mem, b: c.CapacityMiB})
	}
	if checkIdle(c, idleOnly, r) {
		return true
	}
	freeCores, freeMiB := 100-used.Cores, c.CapacityMiB-used.MemoryMiB
	switch {
	case used.Tenants >= c.Shares:
		return reject(ReasonShares, rejectDetail{kind: detailShares, a: int64(used.Tenants), b: int64(c.Shares)})
	case cr.Exclusive() && used.Tenants > 0:
		return reject(ReasonNotIdle, rejectDetail{kind: detailNotIdle, a: int64(used.Tenants)})
	case used.Cores >= 100:
		return reject(ReasonCores, rejectDetail{kind: detailCoresFull})
	case cr.Cores > freeCores:
		return reject(ReasonCores, rejectDetail{kind: detailCores, a: int64(cr.Cores), b: int64(freeCores)})
	case mem > freeMiB:
		return reject(ReasonMemory, rejectDetail{kind: detailMemory, a: mem, b: freeMiB, c: c.CapacityMiB})
	}
	return false
}

// CardFiltersAllow reports whether the pod's card filters (its UUID and GPU type
// annotations) let it use the card with this UUID and model: the check every fit
// applies to every card, for others that must judge a card the same way (the
// scheduler's choice of a card to re-partition for MIG).
func CardFiltersAllow(uuid, model string, o *api.PodOptions) bool {
	_, _, refused := checkFilters(uuid, model, o)
	return !refused
}

// checkFilters applies the pod's card filters (its UUID and GPU type annotations) to
// the card with this UUID and model; a MIG request's are the parent card's.
func checkFilters(uuid, model string, o *api.PodOptions) (Reason, rejectDetail, bool) {
	switch {
	case len(o.UUIDInclude) > 0 && !slices.Contains(o.UUIDInclude, uuid):
		return ReasonUUIDFilter, rejectDetail{kind: detailNotInUUIDs}, true
	case slices.Contains(o.UUIDExclude, uuid):
		return ReasonUUIDFilter, rejectDetail{kind: detailInUUIDs}, true
	case len(o.TypeInclude) > 0 && !containsFold(o.TypeInclude, model):
		return ReasonTypeFilter, rejectDetail{kind: detailTypeMissing, text: model}, true
	case containsFold(o.TypeExclude, model):
		return ReasonTypeFilter, rejectDetail{kind: detailTypeExcluded, text: model}, true
	}
	return "", rejectDetail{}, false
}

// containsFold reports whether model contains any of the substrings, ignoring case as
// strings.ToLower does (each rune lowered alone; a byte that is not UTF-8 reads as
// U+FFFD). It runs for every card of every node a typed pod is tried on, so it copies
// nothing: the model is lowered a rune at a time in place, and ParsePodOptions has
// lowered the substrings once (lowering one again here is a compare, and keeps
// hand-built options right). A substring is tried only where as many runes are left
// and, at an ASCII byte, its first rune matches: one costs at most len(s) +
// len(model)² steps, and api.MaxFilterEntries and MaxFilterBytes bound them all.
func containsFold(subs []string, model string) bool {
	runes := utf8.RuneCountInString(model)
	for _, s := range subs {
		// Each rune of s is compared with one rune of model.
		need := utf8.RuneCountInString(s)
		if need == 0 {
			return true // as strings.Contains
		}
		first := rune(lowerASCII(s[0]))
		if s[0] >= utf8.RuneSelf {
			first, _ = utf8.DecodeRuneInString(s)
			first = unicode.ToLower(first)
		}
		for i, left := 0, runes; left >= need; left-- {
			if c := model[i]; c < utf8.RuneSelf {
				if rune(lowerASCII(c)) == first && hasPrefixFold(model[i:], s) {
					return true
				}
				i++
				continue
			}
			if hasPrefixFold(model[i:], s) {
				return true
			}
			_, n := utf8.DecodeRuneInString(model[i:])
			i += n
		}
	}
	return false
}

// hasPrefixFold reports whether s, lowered, begins with prefix, lowered.
func hasPrefixFold(s, prefix string) bool {
	// ASCII runs, which every model NVML reports is, byte by byte.
	i := 0
	for ; i < len(prefix) && i < len(s); i++ {
		a, b := s[i], prefix[i]
		if a|b >= utf8.RuneSelf {
			return hasPrefixFoldRunes(s[i:], prefix[i:])
		}
		if a != b && lowerASCII(a) != lowerASCII(b) {
			return false
		}
	}
	return i == len(prefix)
}

// hasPrefixFoldRunes is hasPrefixFold a rune at a time, for text beyond ASCII, where
// lowering may change a rune's length in bytes.
func hasPrefixFoldRunes(s, prefix string) bool {
	for len(prefix) > 0 {
		if len(s) == 0 {
			return false
		}
		r, n := utf8.DecodeRuneInString(s)
		p, m := utf8.DecodeRuneInString(prefix)
		if unicode.ToLower(r) != unicode.ToLower(p) {
			return false
		}
		s, prefix = s[n:], prefix[m:]
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
