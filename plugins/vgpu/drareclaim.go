package vgpu

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/capacity"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
)

// The claim reclaimer: Tessera takes cards back for claims itself, because Volcano
// v1.14.1's reclaim never asks (dravictims_session.go says why). Once per session, at
// the end of OnSessionOpen, it serves at most one pending pod whose claims of
// vgpu.tessera.io fit no DRA node as the cards stand and whose queue is below its card
// share: it evicts, through the session, the fewest DRA pods of queues above their
// share whose claims, freed, let that pod's claims fit one node. The pod is placed by
// a later session, once its victims and their claims are gone.
//
// Why at session open and not at close: the card book read at open is exact (a claim
// Volcano allocates during the session is counted from what it asks, not from the card
// the allocator chose, until the next session), and the victims are Releasing for this
// session's actions, which treat them as Volcano's own evictions.

// reclaimForClaims evicts for one pending DRA pod, as above; cb is what readClaims read.
// It does nothing with vgpu.DRAReclaim or vgpu.QueueShare off, when a queue plugin
// opened before vgpu (openedBefore), while the scheduler's cache is loading, and while
// earlier victims or their claims are still going.
func (p *vgpuPlugin) reclaimForClaims(ssn *framework.Session, cb *claimBook) {
	if !p.args.DRAReclaim || p.shares == nil || cb == nil || len(cb.byKey) == 0 {
		return
	}
	if first := queuePluginOpenedBefore(ssn.Tiers); first != "" {
		klog.V(2).InfoS("No DRA reclaim: a queue plugin opens before vgpu; put vgpu in an earlier tier",
			"plugin", first)
		return
	}
	nodes := p.draNodes(ssn)
	if len(nodes) == 0 {
		return
	}
	if p.cacheMissing > 0 {
		klog.V(4).InfoS("No DRA reclaim while the scheduler's cache is loading", "podsNotInCache", p.cacheMissing)
		return
	}
	if why := p.claimsGoing(ssn, cb); why != "" {
		klog.V(4).InfoS("No DRA reclaim while earlier victims are going", "reason", why)
		return
	}
	sharedFirst := p.sharedFirstCards()
	for _, job := range p.reclaimingJobs(ssn) {
		evictor, asks := p.claimEvictor(job)
		if evictor == nil {
			continue
		}
		if !p.preemptive(ssn.Queues[job.Queue], evictor) {
			continue // its queue is at its card share (logged)
		}
		node, victims, ok := p.cheapestDRAVictims(evictor, asks, nodes, sharedFirst)
		if !ok {
			continue
		}
		p.evictForClaims(ssn, evictor, node, victims)
		return // one evictor a session
	}
}

// queuePluginOpenedBefore names the first of Volcano's proportion and capacity plugins
// that the tiers open before vgpu, or "" when vgpu opens first. Either keeps, from its
// own open, each queue's allocated resources and the part of its jobs beyond their
// minimum (elastic), takes an evicted pod off the first only, and in enqueue subtracts
// the second from a sum holding the first, which Volcano's resource arithmetic refuses
// with a panic once the first is the smaller. Volcano's own evictions come after
// enqueue; an eviction at vgpu's open comes before it, so it is safe only when vgpu
// opens first and those plugins read the victims already Releasing.
func queuePluginOpenedBefore(tiers []conf.Tier) string {
	for _, t := range tiers {
		for _, o := range t.Plugins {
			switch o.Name {
			case PluginName:
				return ""
			case proportion.PluginName, capacity.PluginName:
				return o.Name
			}
		}
	}
	return ""
}

// draNodes are the session's nodes that are DRA nodes of the card book, by name.
func (p *vgpuPlugin) draNodes(ssn *framework.Session) []*vapi.NodeInfo {
	var out []*vapi.NodeInfo
	for name, n := range ssn.Nodes {
		if n != nil && n.Node != nil && p.ledger.DRANode(name) != nil {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// claimsGoing says why the cards are still changing hands, or "" when they are not: a
// pod with claims being evicted or deleted (Releasing), or an allocated claim of the
// driver that no pod the session knows references (its pod is gone, and the
// resourceclaim controller has not yet released it). Evicting again then would take
// more than the evictor needs.
func (p *vgpuPlugin) claimsGoing(ssn *framework.Session, cb *claimBook) string {
	referenced := map[string]bool{}
	note := func(t *vapi.TaskInfo) string {
		if t.Pod == nil || len(t.Pod.Spec.ResourceClaims) == 0 {
			return ""
		}
		for _, key := range podClaimKeys(t.Pod) {
			referenced[key] = true
		}
		if t.Status == vapi.Releasing {
			return fmt.Sprintf("pod %s/%s is terminating", t.Namespace, t.Name)
		}
		return ""
	}
	for _, n := range ssn.Nodes {
		for _, t := range n.Tasks {
			if why := note(t); why != "" {
				return why
			}
		}
	}
	for _, job := range ssn.Jobs {
		for _, t := range job.Tasks {
			if why := note(t); why != "" {
				return why
			}
		}
	}
	keys := make([]string, 0, len(cb.heldByClaim))
	for key := range cb.heldByClaim {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if c := cb.byKey[key]; c != nil && c.DeletionTimestamp != nil {
			return "claim " + key + " is being deleted"
		}
		if !referenced[key] {
			return "claim " + key + " is allocated and no pod of the session uses it"
		}
	}
	return ""
}

// reclaimingJobs are the enqueued jobs with pending tasks (allocate tries no other),
// their queues below their card share first (the queue share's order), then in the
// session's job order.
func (p *vgpuPlugin) reclaimingJobs(ssn *framework.Session) []*vapi.JobInfo {
	var jobs []*vapi.JobInfo
	for _, job := range ssn.Jobs {
		if len(job.TaskStatusIndex[vapi.Pending]) > 0 && ssn.Queues[job.Queue] != nil && !job.IsPending() {
			jobs = append(jobs, job)
		}
	}
	sort.Slice(jobs, func(i, j int) bool {
		l, r := jobs[i], jobs[j]
		if l.Queue != r.Queue {
			if c := p.shares.Compare(ssn.Queues[l.Queue], ssn.Queues[r.Queue]); c != 0 {
				return c < 0
			}
			return l.Queue < r.Queue
		}
		if ssn.JobOrderFn(l, r) != ssn.JobOrderFn(r, l) {
			return ssn.JobOrderFn(l, r)
		}
		return l.UID < r.UID
	})
	return jobs
}

// claimEvictor is the job's task to serve and what it asks: its pending tasks whose
// claims ask for cards, as many as the job lacks to reach its minimum (one at least),
// asked together of one node, the first in name order speaking for them. nil when the
// job has no such task.
func (p *vgpuPlugin) claimEvictor(job *vapi.JobInfo) (*vapi.TaskInfo, []draAsk) {
	pending := make([]*vapi.TaskInfo, 0, len(job.TaskStatusIndex[vapi.Pending]))
	for _, t := range job.TaskStatusIndex[vapi.Pending] {
		if !t.SchGated { // a gated pod is not scheduled, cards or not
			pending = append(pending, t)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i].Name < pending[j].Name })
	need := int(job.MinAvailable - job.ReadyTaskNum())
	if need < 1 {
		need = 1
	}
	var evictor *vapi.TaskInfo
	var asks []draAsk
	groups := 0
	for _, t := range pending {
		a, ok := p.draAsks(t)
		if !ok {
			continue
		}
		if evictor == nil {
			evictor = t
		}
		top := 0
		for _, x := range a {
			x.Group += groups // the cards of one request differ, whichever task asks
			if x.Group+1 > top {
				top = x.Group + 1
			}
			asks = append(asks, x)
		}
		groups = top
		if need--; need == 0 {
			break
		}
	}
	return evictor, asks
}

// cheapestDRAVictims is, over the DRA nodes the evictor's pod may go to (its node
// selector and required node affinity), the node where the fewest victims of other
// queues free enough cards, and where the evictor's CPU and memory then fit. ok is
// false when the asks fit some node already (the allocator will place them, or waits
// for something else than cards) or no node frees enough.
func (p *vgpuPlugin) cheapestDRAVictims(evictor *vapi.TaskInfo, asks []draAsk, nodes []*vapi.NodeInfo,
	sharedFirst map[string]bool) (*vapi.NodeInfo, []*vapi.TaskInfo, bool) {
	affinity := nodeaffinity.GetRequiredNodeAffinity(evictor.Pod)
	var best *vapi.NodeInfo
	var bestSet []*vapi.TaskInfo
	for _, n := range nodes {
		if match, err := affinity.Match(n.Node); err != nil || !match || n.Node.Spec.Unschedulable {
			continue
		}
		candidates := make([]*vapi.TaskInfo, 0, len(n.Tasks))
		for _, t := range n.Tasks {
			candidates = append(candidates, t)
		}
		sort.Slice(candidates, func(i, j int) bool { return candidates[i].UID < candidates[j].UID })
		set, _, fitsAlready, ok := p.draVictimSet(evictor, asks, n, candidates, true, sharedFirst)
		if !ok {
			continue
		}
		if fitsAlready {
			klog.V(4).InfoS("DRA task's claims fit a DRA node as it stands; no reclaim for it", "task", klog.KRef(evictor.Namespace, evictor.Name),
				"node", n.Name)
			return nil, nil, false
		}
		if len(set) == 0 || (best != nil && len(set) >= len(bestSet)) {
			continue
		}
		idle := n.FutureIdle()
		for _, v := range set {
			idle.Add(v.Resreq)
		}
		if !evictor.InitResreq.LessEqual(idle, vapi.Zero) {
			continue
		}
		best, bestSet = n, set
	}
	return best, bestSet, best != nil
}

// evictForClaims evicts the victims through the session: Volcano's cache deletes each
// pod (its defaultEvictor) and records an Evict event with the reason on the victim's
// PodGroup, and the session marks it Releasing.
func (p *vgpuPlugin) evictForClaims(ssn *framework.Session, evictor *vapi.TaskInfo, node *vapi.NodeInfo, victims []*vapi.TaskInfo) {
	eq := ssn.Jobs[evictor.Job].Queue
	var names []string
	victimQueues := map[string]bool{}
	for _, v := range victims {
		names = append(names, v.Namespace+"/"+v.Name)
		if j := ssn.Jobs[v.Job]; j != nil {
			victimQueues[string(j.Queue)] = true
		}
	}
	queues := make([]string, 0, len(victimQueues))
	for q := range victimQueues {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	var standings []string
	for _, s := range p.shares.Standings() {
		if s.Queue == eq || victimQueues[string(s.Queue)] {
			standings = append(standings, fmt.Sprintf("%s: holds %s of %s deserved", s.Name, s.Allocated.String(), s.Deserved.String()))
		}
	}
	klog.V(2).InfoS("Reclaiming cards for claims", "evictor", klog.KRef(evictor.Namespace, evictor.Name), "queue", eq,
		"node", node.Name, "victims", names, "victimQueues", queues, "shares", strings.Join(standings, "; "))
	reason := fmt.Sprintf("Tessera reclaims the cards of its claims for %s/%s of queue %s, below its card share, from queue %s, above its share",
		evictor.Namespace, evictor.Name, eq, strings.Join(queues, ", "))
	for _, v := range victims {
		if j := ssn.Jobs[v.Job]; j != nil && j.Tasks[v.UID] != nil {
			// The job's copy: the node's is a clone, which Volcano's session updates
			// from the job's on eviction (reclaim hands it a clone for the same reason).
			v = j.Tasks[v.UID]
		}
		if err := ssn.Evict(v, reason); err != nil {
			klog.ErrorS(err, "Evicting a DRA pod to reclaim its cards for claims", "victim", klog.KRef(v.Namespace, v.Name),
				"evictor", klog.KRef(evictor.Namespace, evictor.Name))
		}
	}
}
