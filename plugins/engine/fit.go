package engine

import (
	"sort"
	"strings"

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
}

// Fit is a feasible placement of a pod on a node.
type Fit struct {
	Node       string
	Containers []api.ContainerAssignment
	// Score is the node's score for this pod, 0..100, higher is better.
	Score float64
}

// FitPod chooses cards for every container of the request on node n, containers in
// order, each seeing the cards the earlier ones took. It does not change n. On
// failure it returns a *FitError naming the container and, per card, the limit that
// failed.
func FitPod(n *Node, req *Request) (*Fit, *FitError) {
	scratch := n.Clone()
	fit := &Fit{Node: n.Name, Containers: make([]api.ContainerAssignment, 0, len(req.Containers))}
	for _, cr := range req.Containers {
		chosen, ferr := fitContainer(scratch, &cr, req)
		if ferr != nil {
			return nil, ferr
		}
		ca := api.ContainerAssignment{Name: cr.Name, Cards: make([]api.CardAssignment, len(chosen))}
		for i, idx := range chosen {
			c := &scratch.Cards[idx]
			mem := memoryFor(&c.Card, &cr)
			ca.Cards[i] = api.CardAssignment{UUID: c.UUID, MemoryMiB: mem, Cores: cr.Cores}
			c.Used.add(Usage{MemoryMiB: mem, Cores: cr.Cores, Tenants: 1})
		}
		fit.Containers = append(fit.Containers, ca)
	}
	fit.Score = NodeScore(scratch, req.NodePolicy)
	return fit, nil
}

type candidate struct {
	idx   int
	score float64
}

func fitContainer(n *Node, cr *api.ContainerRequest, req *Request) ([]int, *FitError) {
	cands := make([]candidate, 0, len(n.Cards))
	var rejects []CardReject
	for i := range n.Cards {
		c := &n.Cards[i]
		if r := checkCard(c, cr, &req.Options); r != nil {
			rejects = append(rejects, *r)
			continue
		}
		cands = append(cands, candidate{idx: i, score: CardScore(c, memoryFor(&c.Card, cr), cr.Cores, req.CardPolicy)})
	}
	if len(cands) < cr.Cards {
		return nil, &FitError{Node: n.Name, Container: cr.Name, Wanted: cr.Cards, Fitting: len(cands), Cards: len(n.Cards), Rejects: rejects}
	}
	// Highest score first; the lower card index breaks ties so results are deterministic.
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].score != cands[b].score {
			return cands[a].score > cands[b].score
		}
		return cands[a].idx < cands[b].idx
	})
	out := make([]int, cr.Cards)
	for i := range out {
		out[i] = cands[i].idx
	}
	sort.Ints(out)
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

// checkCard applies the hard filters, cheapest and most permanent first.
func checkCard(c *CardState, cr *api.ContainerRequest, o *api.PodOptions) *CardReject {
	reject := func(reason Reason, detail string) *CardReject {
		return &CardReject{Index: c.Index, UUID: c.UUID, Reason: reason, Detail: detail}
	}
	switch {
	case !c.Healthy:
		return reject(ReasonUnhealthy, "")
	case c.MIG:
		return reject(ReasonMIG, "")
	case len(o.UUIDInclude) > 0 && !contains(o.UUIDInclude, c.UUID):
		return reject(ReasonUUIDFilter, "not in "+api.AnnotationGPUUUIDInclude)
	case contains(o.UUIDExclude, c.UUID):
		return reject(ReasonUUIDFilter, "listed in "+api.AnnotationGPUUUIDExclude)
	case len(o.TypeInclude) > 0 && !containsFold(o.TypeInclude, c.Model):
		return reject(ReasonTypeFilter, "model "+c.Model+" matches nothing in "+api.AnnotationGPUTypeInclude)
	case containsFold(o.TypeExclude, c.Model):
		return reject(ReasonTypeFilter, "model "+c.Model+" matches "+api.AnnotationGPUTypeExclude)
	}
	mem := memoryFor(&c.Card, cr)
	if mem > c.CapacityMiB {
		return reject(ReasonTooSmall, itoa(mem)+" MiB wanted, card has "+itoa(c.CapacityMiB)+" MiB")
	}
	switch {
	case c.Used.Tenants >= c.Shares:
		return reject(ReasonShares, itoa(int64(c.Used.Tenants))+" of "+itoa(int64(c.Shares))+" shares taken")
	case cr.Exclusive() && c.Used.Tenants > 0:
		return reject(ReasonNotIdle, "an exclusive (100% cores) request needs an idle card; "+itoa(int64(c.Used.Tenants))+" tenants")
	case c.Used.Cores >= 100:
		return reject(ReasonCores, "card's cores are fully taken")
	case cr.Cores > c.FreeCores():
		return reject(ReasonCores, itoa(int64(cr.Cores))+"% wanted, "+itoa(int64(c.FreeCores()))+"% free")
	case mem > c.FreeMiB():
		return reject(ReasonMemory, itoa(mem)+" MiB wanted, "+itoa(c.FreeMiB())+" of "+itoa(c.CapacityMiB)+" MiB free")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// containsFold reports whether model contains any of the substrings, ignoring case.
func containsFold(subs []string, model string) bool {
	m := strings.ToLower(model)
	for _, s := range subs {
		if strings.Contains(m, strings.ToLower(s)) {
			return true
		}
	}
	return false
}
