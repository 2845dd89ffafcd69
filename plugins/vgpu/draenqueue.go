package vgpu

import (
	"fmt"
	"sort"

	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// Enqueue for gangs whose members ask for Tessera's cards through ResourceClaims of
// class vgpu.tessera.io. The Kubernetes allocator (in Volcano's predicates plugin)
// places such claims only on the cards of DRA nodes, so a gang is judged against
// those cards alone: refused while it can never fit there (a card asked bigger than
// the largest, more cards in one claim than any node has, a minimum beyond all the
// cards together), held while its queue's capability cannot hold it, or while the free
// cards cannot and its queue is not owed them: as enqueue.go does for device-plugin
// gangs. Preempt does not override the hold here: the plugin offers device-plugin pods
// as victims, and those never free a DRA node's card.

// claimMember is a pending member whose pod uses claims of Tessera's class.
type claimMember struct {
	pod string
	// claims are its claims of the class not yet allocated (an allocated claim holds
	// its cards already, in the card book) and not counted for another member of the
	// job (a claim several members share is allocated once).
	claims []memberClaim
}

// memberClaim is one claim's requests of Tessera's class.
type memberClaim struct {
	key      string
	requests []dracost.CardRequest
}

// cost is what the member asks of the cards: count × per card, a request that names
// no memory (the whole card) priced at wholeMiB.
func (m claimMember) cost(wholeMiB int64) fairshare.Amount {
	var a fairshare.Amount
	for _, c := range m.claims {
		for _, r := range c.requests {
			mem := r.MemoryMiB
			if mem == 0 {
				mem = wholeMiB
			}
			a.MemoryMiB += float64(r.Count * mem)
			a.Cores += float64(r.Count * r.Cores)
		}
	}
	return a
}

// draSupply is what the cards of the DRA nodes offer to claims.
type draSupply struct {
	// cards counts the healthy cards not in MIG mode, on cordoned nodes too: a cordon
	// is a pause, not a smaller cluster (as Ledger.Total says).
	cards int
	// mostCards is the most such cards on one node: all the cards of a claim are on
	// its pod's node, each once (the agent refuses a claim that names a card twice).
	mostCards int
	// largestMiB and smallestMiB are the memory of the largest and smallest such card.
	largestMiB, smallestMiB int64
	// total is their memory and 100 cores each; free what the cards that take claims
	// now (neither they nor their node cordoned) have left.
	total, free fairshare.Amount
}

// costs prices every member at wholeMiB for a request without memory.
func claimCosts(members []claimMember, wholeMiB int64) []fairshare.Amount {
	out := make([]fairshare.Amount, len(members))
	for i, m := range members {
		out[i] = m.cost(wholeMiB)
	}
	return out
}

// claimNeverFits says why need of members can never hold on the DRA nodes' cards, or
// "". A member with a claim no node can take never runs; the rest are priced from
// below (a request without memory at the smallest card) and summed, cheapest first,
// against every card.
func claimNeverFits(members []claimMember, need int, s draSupply) string {
	if s.cards == 0 {
		return fmt.Sprintf("no DRA node (%s: %s) has healthy cards for claims of %s", api.AnnotationCardAPI, api.CardAPIDRA, dracost.Class)
	}
	var fitting []claimMember
	firstWhy := ""
	for _, m := range members {
		why := memberNeverFits(m, s)
		if why == "" {
			fitting = append(fitting, m)
		} else if firstWhy == "" {
			firstWhy = "pod " + m.pod + ": " + why
		}
	}
	if len(fitting) < need && firstWhy != "" {
		return fmt.Sprintf("%d of %d pending members can run, %d more needed: %s", len(fitting), len(members), need, firstWhy)
	}
	sum := shares.Cheapest(claimCosts(fitting, s.smallestMiB), need)
	switch {
	case sum.MemoryMiB > s.total.MemoryMiB:
		return fmt.Sprintf("%s at least %.0f MiB of card memory; the DRA nodes have %.0f MiB on %d healthy cards",
			membersNeed(need), sum.MemoryMiB, s.total.MemoryMiB, s.cards)
	case sum.Cores > s.total.Cores:
		return fmt.Sprintf("%s at least %.0f%% of card cores; the DRA nodes have %.0f%% on %d healthy cards",
			membersNeed(need), sum.Cores, s.total.Cores, s.cards)
	}
	return ""
}

// memberNeverFits says why one of a member's claims fits no DRA node, or "".
func memberNeverFits(m claimMember, s draSupply) string {
	for _, c := range m.claims {
		var cards int64
		for _, r := range c.requests {
			if r.MemoryMiB > s.largestMiB {
				return fmt.Sprintf("%s asks %d MiB of each card; the largest card of the DRA nodes has %d MiB",
					r.Field, r.MemoryMiB, s.largestMiB)
			}
			cards += r.Count
		}
		if cards > int64(s.mostCards) {
			return fmt.Sprintf("claim %s asks for %d cards; no DRA node has more than %d healthy cards", c.key, cards, s.mostCards)
		}
	}
	return ""
}

// claimBeyondFree says why need of members cannot hold on what the DRA nodes' cards
// have free now, or "".
func claimBeyondFree(members []claimMember, need int, s draSupply) string {
	sum := shares.Cheapest(claimCosts(members, s.smallestMiB), need)
	switch {
	case sum.MemoryMiB > s.free.MemoryMiB:
		return fmt.Sprintf("%s at least %.0f MiB of card memory, %.0f MiB free on the DRA nodes",
			membersNeed(need), sum.MemoryMiB, s.free.MemoryMiB)
	case sum.Cores > s.free.Cores:
		return fmt.Sprintf("%s at least %.0f%% of card cores, %.0f%% free on the DRA nodes", membersNeed(need), sum.Cores, s.free.Cores)
	}
	return ""
}

// membersNeed is "1 member needs" or "n members need".
func membersNeed(n int) string {
	if n == 1 {
		return "1 member needs"
	}
	return fmt.Sprintf("%d members need", n)
}

// claimGangEnqueueable is jobEnqueueable for the members whose pods use claims of
// Tessera's class; it abstains for a job without any.
func (p *vgpuPlugin) claimGangEnqueueable(job *vapi.JobInfo) int {
	members, others := p.pendingClaimMembers(job)
	if len(members) == 0 {
		return util.Abstain
	}
	// Members of other kinds are judged elsewhere (device-plugin ones in enqueue.go);
	// here they count as placeable.
	need := int(job.MinAvailable) - int(job.ReadyTaskNum()) - int(job.WaitingTaskNum()) - others
	if need <= 0 {
		return util.Abstain
	}
	why := ""
	var costs []fairshare.Amount
	if p.shares != nil {
		// Priced as the queue shares price the claims (chargeClaims).
		costs = claimCosts(members, p.ledger.LargestDRACardMiB())
		why = p.shares.BeyondCapability(job.Queue, costs, need)
	}
	if why == "" && p.cacheMissing > 0 {
		return util.Abstain // the cards are not known while the cache loads (cacheload.go)
	}
	s := p.draSupply()
	if why == "" {
		if w := claimNeverFits(members, need, s); w != "" {
			why = "the gang can never fit on the DRA nodes: " + w
		}
	}
	if why == "" {
		why = claimBeyondFree(members, need, s)
		if why != "" && p.shares != nil && p.shares.Entitled(job.Queue, costs, need) {
			why = "" // owed the cards: the others' claims end, or reclaim takes them back
		}
	}
	if why == "" {
		return util.Abstain
	}
	p.refuseGang(job, PluginName+": "+why)
	klog.V(3).InfoS("DRA job not enqueued", "job", klog.KRef(job.Namespace, job.Name), "queue", job.Queue, "reason", why)
	return util.Reject
}

// pendingClaimMembers reads the job's pending members that use claims of Tessera's
// class; others counts the rest (device-plugin, CPU-only, other drivers' claims, and
// members whose claims are not created yet or cannot be costed).
func (p *vgpuPlugin) pendingClaimMembers(job *vapi.JobInfo) (members []claimMember, others int) {
	pending := job.TaskStatusIndex[vapi.Pending]
	if p.ssn == nil || len(pending) == 0 {
		return nil, len(pending)
	}
	m := p.ssn.SharedDRAManager()
	if m == nil || m.ResourceClaims() == nil {
		return nil, len(pending)
	}
	usesClaims := func(t *vapi.TaskInfo) bool {
		return t.Pod != nil && len(t.Pod.Spec.ResourceClaims) > 0 && !p.args.Resources.HasVGPURequest(t.Pod)
	}
	// In name order, so that a claim the members share is counted for the same member
	// every session; nothing to sort for the jobs (most) without claims.
	tasks := make([]*vapi.TaskInfo, 0, len(pending))
	for _, t := range pending {
		if usesClaims(t) {
			tasks = append(tasks, t)
		}
	}
	others = len(pending) - len(tasks)
	if len(tasks) == 0 {
		return nil, others
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
	seen := map[string]bool{}
	for _, t := range tasks {
		member, ok := p.claimMemberOf(t, seen)
		if !ok {
			others++
			continue
		}
		members = append(members, member)
	}
	return members, others
}

// claimMemberOf reads a pending task's claims; ok is false when it uses none of
// Tessera's class, or one the session cannot read or cost.
func (p *vgpuPlugin) claimMemberOf(t *vapi.TaskInfo, seen map[string]bool) (claimMember, bool) {
	tracker := p.ssn.SharedDRAManager().ResourceClaims()
	member := claimMember{pod: t.Namespace + "/" + t.Name}
	ours := false
	for i := range t.Pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(t.Pod, &t.Pod.Spec.ResourceClaims[i])
		if err != nil {
			// From a template, and the resourceclaim controller has not created it yet.
			return claimMember{}, false
		}
		if name == nil {
			continue // the template needs no claim for this pod
		}
		key := t.Pod.Namespace + "/" + *name
		c, err := tracker.Get(t.Pod.Namespace, *name)
		if err != nil || c == nil {
			klog.V(4).InfoS("Pending pod's claim is not in the session; its gang is not judged on it", "pod", klog.KObj(t.Pod),
				"claim", key, "err", err)
			return claimMember{}, false
		}
		reqs, tessera, err := dracost.CardRequests(c)
		if err != nil {
			klog.V(4).InfoS("Pending pod's claim cannot be costed; its gang is not judged on it", "pod", klog.KObj(t.Pod), "err", err)
			return claimMember{}, false
		}
		if !tessera {
			continue
		}
		ours = true
		if c.Status.Allocation != nil || seen[key] {
			continue
		}
		seen[key] = true
		member.claims = append(member.claims, memberClaim{key: key, requests: reqs})
	}
	return member, ours
}

// draSupply reads the DRA nodes' cards from the card book.
func (p *vgpuPlugin) draSupply() draSupply {
	var s draSupply
	if p.ssn == nil {
		return s
	}
	cordoned := map[string]bool{}
	for _, ni := range p.ssn.Nodes {
		if ni != nil && ni.Node != nil && ni.Node.Annotations[api.AnnotationCardAPI] == api.CardAPIDRA {
			cordoned[ni.Name] = ni.Node.Spec.Unschedulable
		}
	}
	perNode := map[string]int{}
	p.ledger.EachCard(func(node string, c *placement.CardState) {
		nodeCordoned, dra := cordoned[node]
		if !dra || !c.Healthy || c.MIG {
			return
		}
		s.cards++
		perNode[node]++
		s.mostCards = max(s.mostCards, perNode[node])
		s.largestMiB = max(s.largestMiB, c.CapacityMiB)
		if s.smallestMiB == 0 || c.CapacityMiB < s.smallestMiB {
			s.smallestMiB = c.CapacityMiB
		}
		s.total.MemoryMiB += float64(c.CapacityMiB)
		s.total.Cores += 100
		if nodeCordoned || c.Cordon != nil {
			return
		}
		s.free.MemoryMiB += float64(max(0, c.FreeMiB()))
		s.free.Cores += float64(max(0, c.FreeCores()))
	})
	return s
}
