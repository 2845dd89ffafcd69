package vgpu

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/plugins/util"

	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
)

// The session's side of the DRA victims (dravictims.go): what a DRA evictor's claims
// ask, what each candidate's claims hold on the node, which candidates may go.
//
// What Volcano v1.14.1 does with them: nothing yet. Kubernetes 1.34's allocator
// refuses a node whose cards cannot take a pod's claims as UnschedulableAndUnresolvable,
// so Volcano's preempt and reclaim drop the node before they ask any plugin for
// victims; and evicting a pod in a session does not release its claims there (the
// allocator's view of the allocated devices is taken before victims are chosen, and
// the pod's claims stay allocated until the pod is gone). The dravictims tests pin
// both. The plugin still chooses as it would once Volcano asks, and never lets another
// plugin's choice (a device-plugin or CPU pod) stand for a DRA evictor's cards; meanwhile
// its own claim reclaimer (drareclaim.go) evicts what draVictimSet chooses.

// victims chooses, among the candidates Volcano offers on one node, the fewest tasks
// whose cards make the evictor fit: vGPU tasks for a vGPU evictor (pickVictims,
// victims.go), DRA pods for an evictor whose claims ask for cards (draVictims). Other
// candidates are never offered for either; other evictors are left to the other
// plugins.
func (p *vgpuPlugin) victims(evictor *vapi.TaskInfo, candidates []*vapi.TaskInfo) ([]*vapi.TaskInfo, int) {
	if len(candidates) == 0 {
		return nil, util.Abstain
	}
	tr := p.request(evictor)
	if tr == nil {
		if asks, ok := p.draAsks(evictor); ok {
			return p.draVictims(evictor, asks, candidates) // claims' cards: dravictims_session.go
		}
		return nil, util.Abstain
	}
	if tr.Err != nil {
		return nil, util.Abstain
	}
	if p.cacheMissing > 0 {
		// Which queue is over its share, and what a node's cards hold, are not known
		// until the cache holds every bound vGPU pod (cacheload.go).
		klog.V(4).InfoS("No vGPU victims while the scheduler's cache is loading", "task", klog.KRef(evictor.Namespace, evictor.Name),
			"podsNotInCache", p.cacheMissing)
		return nil, util.Permit
	}
	node, ok := p.ssn.Nodes[candidates[0].NodeName]
	if !ok {
		return nil, util.Permit
	}
	p.evictingOn.Store(evictor.UID, node.Name)
	set, _ := p.pickVictims(evictor, tr, node, gangAdmitted(p.ssn.Jobs, evictor, candidates))
	if len(set) == 0 {
		klog.V(4).InfoS("No vGPU victims on the node free cards for the task", "task", klog.KRef(evictor.Namespace, evictor.Name),
			"node", node.Name, "candidates", len(candidates))
	}
	return set, util.Permit
}

// draVictims is victims for an evictor whose pod asks for cards through claims: on a
// DRA node, the fewest DRA pods of the candidates whose claims, freed, let asks fit
// (pickDRAVictims). Device-plugin and CPU pods are never offered; where the claims fit
// already the plugin abstains (cards are not what the evictor lacks).
func (p *vgpuPlugin) draVictims(evictor *vapi.TaskInfo, asks []draAsk, candidates []*vapi.TaskInfo) ([]*vapi.TaskInfo, int) {
	if p.cacheMissing > 0 {
		return nil, util.Permit
	}
	nodeName := candidates[0].NodeName
	node, ok := p.ssn.Nodes[nodeName]
	if !ok {
		return nil, util.Permit
	}
	set, tasks, fitsAlready, ok := p.draVictimSet(evictor, asks, node, candidates, false, p.sharedFirstCards())
	if !ok {
		return nil, util.Permit // no DRA cards here: nothing freed would take the claims
	}
	if fitsAlready {
		return nil, util.Abstain
	}
	// As for device-plugin pods (victims.go): Volcano stops evicting once CPU, memory
	// and slots fit, so a set of several victims helps only where each is needed there.
	if len(set) > 1 {
		idle := node.FutureIdle()
		for _, t := range tasks {
			if evictor.InitResreq.LessEqual(idle.Clone().Add(t.Resreq), vapi.Zero) {
				set = nil
				break
			}
		}
	}
	if len(set) == 0 {
		klog.V(4).InfoS("No DRA victims on the node free cards for the task's claims", "task", klog.KRef(evictor.Namespace, evictor.Name),
			"node", nodeName, "candidates", len(candidates))
	}
	return set, util.Permit
}

// draVictimSet is the choice behind draVictims and the claim reclaimer (drareclaim.go):
// among candidates on node, the fewest running DRA pods the evictor may take (another
// queue's above its card share, or, unless otherQueuesOnly, a lower priority in its own
// queue; each job keeps its minimum) whose claims, freed, let asks fit the node's cards,
// counting the pods being evicted there as gone. tasks are every candidate allowed;
// fitsAlready is true when the asks fit without evicting; ok is false for a node that is
// not a DRA node of the card book. sharedFirst is sharedFirstCards'.
func (p *vgpuPlugin) draVictimSet(evictor *vapi.TaskInfo, asks []draAsk, node *vapi.NodeInfo, candidates []*vapi.TaskInfo,
	otherQueuesOnly bool, sharedFirst map[string]bool) (set, tasks []*vapi.TaskInfo, fitsAlready, ok bool) {
	cards := p.draNodeCards(node.Name, sharedFirst[node.Name])
	if cards == nil {
		return nil, nil, false, false
	}
	// Pods being evicted there already leave their cards.
	var releasing []draHolder
	for _, t := range node.Tasks {
		if t.Status == vapi.Releasing {
			if h, held := p.draHolding(node.Name, t); held {
				releasing = append(releasing, h)
			}
		}
	}
	cards = freed(cards, releasing)
	jobs := p.ssn.Jobs
	ej := jobs[evictor.Job]
	reclaim := ej != nil
	var holders []draHolder
	spare := map[string]int{}
	for _, c := range gangAdmitted(jobs, evictor, candidates) {
		if c.Status != vapi.Running || c.Job == evictor.Job || !p.evictable(evictor, c) {
			continue
		}
		if otherQueuesOnly && (ej == nil || jobs[c.Job] == nil || jobs[c.Job].Queue == ej.Queue) {
			continue
		}
		h, held := p.draHolding(node.Name, c)
		if !held {
			continue
		}
		if job := jobs[c.Job]; job != nil {
			if _, seen := spare[h.Job]; !seen {
				spare[h.Job] = int(gangSpare(job, reclaim && ej.Queue != job.Queue))
			}
		}
		holders, tasks = append(holders, h), append(tasks, c)
	}
	picked, fitsAlready := pickDRAVictims(cards, asks, holders, spare)
	for _, i := range picked {
		set = append(set, tasks[i])
	}
	return set, tasks, fitsAlready, true
}

// draNodeCards are the cards of a DRA node that take claims, with what the session's
// allocated claims consume; nil for a node that is not a DRA node of the card book.
// With sharedFirst (the node publishes card-0 as a device several claims may share) the
// card of the lowest index is marked SliceFirst: the 1.34.2 allocator's defect bites.
func (p *vgpuPlugin) draNodeCards(node string, sharedFirst bool) []draCard {
	n := p.ledger.DRANode(node)
	if n == nil {
		return nil
	}
	cards := make([]draCard, 0, len(n.Cards))
	first := -1 // the lowest index: the agent publishes card-<index> in index order
	for i := range n.Cards {
		if first < 0 || n.Cards[i].Index < n.Cards[first].Index {
			first = i
		}
	}
	for i := range n.Cards {
		c := &n.Cards[i]
		if p.ledger.DRATakesClaims(node, c) {
			cards = append(cards, draCard{UUID: c.UUID, CapacityMiB: c.CapacityMiB, UsedMiB: c.Used.MemoryMiB, UsedCores: c.Used.Cores,
				SliceFirst: sharedFirst && i == first})
		}
	}
	return cards
}

// freed is cards with what the holders hold there released.
func freed(cards []draCard, holders []draHolder) []draCard {
	out := append([]draCard(nil), cards...)
	for _, h := range holders {
		for _, a := range h.Cards {
			for i := range out {
				if out[i].UUID == a.UUID {
					out[i].UsedMiB -= a.MemoryMiB
					out[i].UsedCores -= a.Cores
				}
			}
		}
	}
	return out
}

// draHolding is what evicting t would free on node: the cards its allocated claims of
// the driver hold there, each claim only while no other pod is reserved for it (a claim
// several pods share stays allocated while any of them runs). false when it frees none.
func (p *vgpuPlugin) draHolding(node string, t *vapi.TaskInfo) (draHolder, bool) {
	if t.Pod == nil || len(t.Pod.Spec.ResourceClaims) == 0 || p.args.Resources.HasVGPURequest(t.Pod) {
		return draHolder{}, false
	}
	h := draHolder{Job: string(t.Job), ID: string(t.UID)}
	for _, key := range podClaimKeys(t.Pod) {
		if !p.onlyHolder(key, t.Pod) {
			continue
		}
		cards, ok := p.ledger.ClaimCards(node, key)
		if !ok {
			continue
		}
		for _, c := range cards {
			h.Cost = h.Cost.Add(fairshare.Amount{MemoryMiB: float64(c.MemoryMiB), Cores: float64(c.Cores)})
		}
		h.Cards = append(h.Cards, cards...)
	}
	return h, len(h.Cards) > 0
}

// onlyHolder reports whether the claim (namespace/name) is reserved for pod alone, or
// for no pod yet.
func (p *vgpuPlugin) onlyHolder(key string, pod *corev1.Pod) bool {
	c := p.sessionClaim(key)
	if c == nil {
		return false
	}
	for _, r := range c.Status.ReservedFor {
		if r.UID != pod.UID {
			return false
		}
	}
	return true
}

// draAsks is what a pending task's unallocated claims of the driver ask, one draAsk
// per card; false for a task that asks for no card through claims (no claims, claims
// of other drivers only, a volcano.sh/vgpu-* pod), or whose claims' cards cannot be
// known (logged).
func (p *vgpuPlugin) draAsks(t *vapi.TaskInfo) ([]draAsk, bool) {
	if t.Pod == nil || len(t.Pod.Spec.ResourceClaims) == 0 || p.args.Resources.HasVGPURequest(t.Pod) {
		return nil, false
	}
	var asks []draAsk
	group := 0
	for _, key := range podClaimKeys(t.Pod) {
		c := p.sessionClaim(key)
		if c == nil || c.Status.Allocation != nil {
			continue // not created yet, or allocated already: it asks for nothing more
		}
		a, groups, ok, err := claimAsks(c, group)
		if err != nil {
			klog.V(4).InfoS("DRA claim's cards are not known before allocation; no DRA victims for the task",
				"task", klog.KRef(t.Namespace, t.Name), "err", err)
			return nil, false
		}
		if ok {
			asks, group = append(asks, a...), group+groups
		}
	}
	return asks, len(asks) > 0
}

// sessionClaim is the claim (namespace/name) as the session's DRA manager holds it; nil
// when DRA is off or the claim is unknown.
func (p *vgpuPlugin) sessionClaim(key string) *resourceapi.ResourceClaim {
	m := p.ssn.SharedDRAManager()
	if m == nil || m.ResourceClaims() == nil {
		return nil
	}
	ns, name, _ := strings.Cut(key, "/")
	c, err := m.ResourceClaims().Get(ns, name)
	if err != nil {
		return nil
	}
	return c
}

// sharedFirstCards are the nodes whose ResourceSlice of the driver starts with a device
// several claims may share (allowMultipleAllocations, which the API server keeps only
// with DRAConsumableCapacity): where Kubernetes 1.34.2's allocator checks every request
// against that device's rest (draCard.SliceFirst). Devices allocated whole, one claim
// each, are checked on their own.
func (p *vgpuPlugin) sharedFirstCards() map[string]bool {
	m := p.ssn.SharedDRAManager()
	if m == nil || m.ResourceSlices() == nil {
		return nil
	}
	slices, err := m.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		klog.V(4).InfoS("Listing ResourceSlices; DRA cards are judged without the 1.34.2 allocator's first-card check", "err", err)
		return nil
	}
	out := map[string]bool{}
	for _, s := range slices {
		if s.Spec.Driver != dracost.Driver || s.Spec.NodeName == nil || len(s.Spec.Devices) == 0 {
			continue
		}
		if d := s.Spec.Devices[0]; d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
			out[*s.Spec.NodeName] = true
		}
	}
	return out
}
