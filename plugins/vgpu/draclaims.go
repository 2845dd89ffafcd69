package vgpu

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// ResourceClaims of Tessera's DRA driver (vgpu.tessera.io) in the card book and the
// queue shares: one ledger for device-plugin placements and DRA claims. The
// Kubernetes allocator (inside Volcano's predicates plugin) still chooses the node and
// the card of every claim; the plugin counts what the claims hold, and holds a pending
// DRA task to its queue's share of card memory and cores.

// claimBook is what one session read from the allocated claims: what each pod holds.
type claimBook struct {
	// byKey holds every claim the session sees, by namespace/name.
	byKey map[string]*resourceapi.ResourceClaim
	// heldByClaim is what each allocated claim of the driver holds, by namespace/name.
	heldByClaim map[string]fairshare.Amount
	// owner is, per allocated claim, the first pod its status.reservedFor lists: a
	// claim several pods share is charged to that pod's queue only.
	owner map[string]types.UID
}

// readClaims adds the cards of the DRA nodes to the card book and books what every
// allocated claim consumes; at session open, after buildLedger. A claim result the
// book cannot count (a device the node does not publish, a bad quantity) is left out,
// logged with its reason and counted in the book's ClaimsSkipped.
func (p *vgpuPlugin) readClaims(ssn *framework.Session) *claimBook {
	now := p.now()
	for _, ni := range ssn.Nodes {
		if ni == nil || ni.Node == nil || ni.Node.Annotations[api.AnnotationCardAPI] != api.CardAPIDRA {
			continue
		}
		inv, err := p.dec.NodeInventory(ni.Node, now, p.args.HeartbeatTimeout)
		if err != nil || inv == nil {
			klog.V(4).InfoS("DRA node's inventory is unusable; its cards are not in the queue shares", "node", ni.Name, "err", err)
			continue
		}
		// No oversubscription: a claim consumes the physical MiB the agent publishes.
		p.ledger.AddDRANode(placement.NewNode(ni.Name, inv, 1), ni.Node.Spec.Unschedulable)
	}
	cb := &claimBook{byKey: map[string]*resourceapi.ResourceClaim{}, heldByClaim: map[string]fairshare.Amount{},
		owner: map[string]types.UID{}}
	claims := sessionClaims(ssn)
	for _, c := range claims {
		key := c.Namespace + "/" + c.Name
		cb.byKey[key] = c
		shares, skips := dracost.Held(c, p.ledger.DRACards)
		for _, s := range skips {
			p.ledger.NoteClaimSkipped(s.Reason)
			if s.Reason == dracost.ReasonUnknownNode {
				// Usually a DRA node whose inventory is stale or not loaded yet: not worth
				// an error line per claim and session.
				klog.V(2).InfoS("DRA claim result on a node without usable DRA cards left out of the card book and the queue shares",
					"claim", klog.KObj(c), "err", s.Err)
				continue
			}
			klog.ErrorS(s.Err, "DRA claim result left out of the card book and the queue shares", "claim", klog.KObj(c),
				"reason", s.Reason)
		}
		if len(shares) == 0 {
			continue
		}
		byNode := map[string][]api.CardAssignment{}
		for _, s := range shares {
			byNode[s.Node] = append(byNode[s.Node], api.CardAssignment{UUID: s.UUID, MemoryMiB: s.MemoryMiB, Cores: s.Cores})
		}
		for node, cards := range byNode {
			for _, err := range p.ledger.AccountClaim(node, key, cards) {
				klog.ErrorS(err, "Booking a DRA claim", "claim", klog.KObj(c), "node", node)
			}
		}
		held := dracost.Sum(shares)
		cb.heldByClaim[key] = held
		if pods := dracost.ReservedPods(c); len(pods) > 0 {
			cb.owner[key] = pods[0]
		}
	}
	if len(claims) > 0 {
		klog.V(4).InfoS("DRA claims read", "claims", len(claims), "allocated", len(cb.heldByClaim),
			"skippedResults", p.ledger.ClaimsSkipped())
	}
	return cb
}

// sessionClaims lists the claims through Volcano's DRA manager, which includes the
// allocations its scheduler has made and not yet seen back; none when DRA is off.
func sessionClaims(ssn *framework.Session) []*resourceapi.ResourceClaim {
	m := ssn.SharedDRAManager()
	if m == nil || m.ResourceClaims() == nil {
		return nil
	}
	claims, err := m.ResourceClaims().List()
	if err != nil {
		klog.ErrorS(err, "Listing ResourceClaims; DRA claims are not counted in this session")
		return nil
	}
	return claims
}

// chargeClaims charges, in the queue shares, every placed task's claims to its queue
// and adds every pending task's claim requests to its queue's demand, then divides the
// cards again; at session open, after buildShares. Tasks whose pods ask for
// volcano.sh/vgpu-* are buildShares'; tasks without claims of the driver are never
// looked at.
func (p *vgpuPlugin) chargeClaims(ssn *framework.Session, cb *claimBook) {
	if p.shares == nil {
		return
	}
	if supply := p.ledger.DRASupply(); supply != (fairshare.Amount{}) {
		// Device-plugin tasks never reach these cards, DRA tasks reach only them.
		p.shares.SetClaimSupply(supply)
		defer p.shares.Divide()
	}
	if cb == nil || len(cb.byKey) == 0 {
		return
	}
	whole := p.ledger.LargestDRACardMiB()
	for _, job := range ssn.Jobs {
		q, ok := ssn.Queues[job.Queue]
		if !ok {
			continue
		}
		for _, task := range job.Tasks {
			if task.Pod == nil || len(task.Pod.Spec.ResourceClaims) == 0 || p.args.Resources.HasVGPURequest(task.Pod) {
				continue
			}
			switch {
			case vapi.AllocatedStatus(task.Status):
				if held, ok := cb.held(task.Pod); ok {
					p.shares.HoldClaims(q, task.UID, held)
				}
			case task.Status == vapi.Pending:
				if cost, ok := cb.asked(task.Pod, whole); ok {
					p.shares.AskClaims(q, task.UID, cost)
				}
			}
		}
	}
	p.shares.Divide()
	ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.onClaimsPlaced})
}

// held is what a placed pod's allocated claims of the driver hold: each claim the pod
// references, unless the claim's status.reservedFor lists another pod first. A claim
// allocated and not yet reserved (Volcano binds the pod after it allocates) counts
// for every pod that references it.
func (cb *claimBook) held(pod *corev1.Pod) (fairshare.Amount, bool) {
	var sum fairshare.Amount
	found := false
	for _, key := range podClaimKeys(pod) {
		h, ok := cb.heldByClaim[key]
		if !ok {
			continue
		}
		if owner, reserved := cb.owner[key]; reserved && owner != pod.UID {
			continue
		}
		sum, found = sum.Add(h), true
	}
	return sum, found
}

// podClaimKeys are the namespace/name of the claims a pod references, those from
// templates once the resourceclaim controller has created them.
func podClaimKeys(pod *corev1.Pod) []string {
	var keys []string
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		keys = append(keys, pod.Namespace+"/"+*name)
	}
	return keys
}

// asked is what a pending pod's claims of the driver ask: what an allocated one holds,
// what an unallocated one requests. ok is false when the pod uses none (or none the
// session sees yet: a claim from a template is created by the resourceclaim
// controller, and the pod cannot be scheduled before).
func (cb *claimBook) asked(pod *corev1.Pod, wholeMiB int64) (fairshare.Amount, bool) {
	var cost fairshare.Amount
	found := false
	for _, key := range podClaimKeys(pod) {
		if held, ok := cb.heldByClaim[key]; ok {
			cost, found = cost.Add(held), true
			continue
		}
		c, ok := cb.byKey[key]
		if !ok || c.Status.Allocation != nil {
			continue // not yet created, or allocated to another driver only
		}
		a, tessera, err := dracost.Asked(c, wholeMiB)
		if err != nil {
			klog.ErrorS(err, "DRA claim's request cannot be costed; the pod is not held to its queue's card share for it",
				"pod", klog.KObj(pod), "claim", klog.KObj(c))
			continue
		}
		if tessera {
			cost, found = cost.Add(a), true
		}
	}
	return cost, found
}

// claimCost is what a task whose pod uses the driver's claims counts for in its
// queue's share; false for every other task, and when the queue share is off.
func (p *vgpuPlugin) claimCost(task *vapi.TaskInfo) (fairshare.Amount, bool) {
	if p.shares == nil {
		return fairshare.Amount{}, false
	}
	return p.shares.ClaimCost(task.UID)
}

// onClaimsPlaced charges a DRA task Volcano placed in this session to its queue: what
// its claims ask (the allocator's card choice is read back by the next session).
func (p *vgpuPlugin) onClaimsPlaced(e *framework.Event) {
	task := e.Task
	cost, ok := p.claimCost(task)
	if !ok {
		return
	}
	if p.shares.Restore(task.UID) {
		return // a discarded eviction: the task holds what it held
	}
	job, ok := p.ssn.Jobs[task.Job]
	if !ok {
		return
	}
	p.shares.Place(task.UID, job.Queue, cost, cost)
}
