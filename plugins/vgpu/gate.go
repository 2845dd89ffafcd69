package vgpu

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// The queue gate (docs/queues.md): with the admission webhook's queueGate on, every
// vGPU pod is created with the scheduling gate queueShareGate. Volcano neither places
// a gated pod nor writes Unschedulable on it, so a cluster autoscaler adds no node for
// a pod that only its queue's card share holds back. Each session, the plugin asks of
// every gang with gated pods what allocate would: does its queue's share admit the
// gang's minimum members now (Shares.Admit, member by member, as allocate charges
// them), and could the queue's capability ever hold them? If so the gate comes off all
// those members together (gate_patch.go, off the session's path); if not it stays and
// the PodGroup says why.

const (
	// gateHeldReason is the reason of the event on a PodGroup whose gang stays gated.
	gateHeldReason = "QueueShareGated"
	// maxGateEvents bounds the events one session writes about gangs kept gated (the
	// event recorder also folds repeats of one message on one PodGroup).
	maxGateEvents = 16
	// maxGateOpens bounds the pods one session ungates (past it, by whole gangs); the
	// rest wait a session.
	maxGateOpens = 256
)

// gatePlan is what one session decides about the gated pods.
type gatePlan struct {
	// open are the pods whose gate comes off (their only gate is Tessera's).
	open []*corev1.Pod
	// held are the gangs that stay gated, with why.
	held []gateHold
}

type gateHold struct {
	job *vapi.JobInfo
	why string
}

// gatedJob is one job with pods gated by Tessera alone.
type gatedJob struct {
	job   *vapi.JobInfo
	tasks []*vapi.TaskInfo // pending vGPU tasks whose only gate is queueShareGate
	// need is how many of tasks the gang needs to reach its minimum: all or none of
	// these are ungated; the rest one by one, as the share admits them.
	need int
}

// openGates decides, at session open, which gated pods may be scheduled now, reports
// the gangs that stay gated, and removes the gates asynchronously. It judges nothing
// while the session lacks bound pods (the shares are not known): the gates stay.
func (p *vgpuPlugin) openGates(ssn *framework.Session) {
	jobs := p.gatedJobs(ssn)
	if len(jobs) == 0 {
		return
	}
	if p.cacheMissing > 0 {
		klog.V(3).InfoS("vGPU queue gates stay while the scheduler's cache loads", "gatedJobs", len(jobs), "podsNotInCache", p.cacheMissing)
		return
	}
	plan := p.planGates(jobs)
	for i, h := range plan.held {
		if i == maxGateEvents {
			break
		}
		ssn.RecordPodGroupEvent(h.job.PodGroup, corev1.EventTypeNormal, gateHeldReason, h.why)
	}
	startUngating(ssn.KubeClient(), plan.open)
	klog.V(3).InfoS("vGPU queue gates", "gatedJobs", len(jobs), "podsUngated", len(plan.open), "gangsHeld", len(plan.held))
}

// gatedJobs lists the jobs with vGPU pods gated by Tessera alone, highest priority
// first, then oldest. A pod that also carries another controller's gate is that
// controller's until it removes its own; CPU pods are never looked at.
func (p *vgpuPlugin) gatedJobs(ssn *framework.Session) []gatedJob {
	var out []gatedJob
	for _, job := range ssn.Jobs {
		var tasks []*vapi.TaskInfo
		ungated := 0
		for _, t := range job.TaskStatusIndex[vapi.Pending] {
			switch gatedBy(t.Pod) {
			case gateNone:
				ungated++
			case gateTessera:
				if p.request(t) != nil {
					tasks = append(tasks, t)
				}
			}
		}
		if len(tasks) == 0 {
			continue
		}
		need := int(job.MinAvailable) - int(job.ReadyTaskNum()) - int(job.WaitingTaskNum()) - ungated
		out = append(out, gatedJob{job: job, tasks: tasks, need: min(max(need, 0), len(tasks))})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].job, out[j].job
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.UID < b.UID
	})
	return out
}

// planGates decides over the session's shares. Without the queue share nothing holds
// a gang back: every gate comes off. With it, the pending pods that carry no gate are
// charged first (they are ahead of the gated ones in allocate), then each gang in
// turn, each admitted member charged before the next is asked, exactly as allocate
// charges its placements; the charges are taken back before the plan returns, so the
// session's shares are as they were.
func (p *vgpuPlugin) planGates(jobs []gatedJob) gatePlan {
	var plan gatePlan
	if p.shares == nil {
		for _, g := range jobs {
			for _, t := range g.tasks {
				plan.open = append(plan.open, t.Pod)
			}
		}
		return plan
	}
	charges := &gateCharges{p: p}
	defer charges.release()
	charges.ungatedPending()
	for _, g := range jobs {
		if len(plan.open) >= maxGateOpens {
			break // whole gangs only; the rest wait a session
		}
		open, why := charges.gang(g)
		for _, t := range open {
			plan.open = append(plan.open, t.Pod)
		}
		if why != "" {
			plan.held = append(plan.held, gateHold{job: g.job, why: why})
			klog.V(4).InfoS("vGPU gang stays gated", "job", klog.KRef(g.job.Namespace, g.job.Name), "reason", why)
		}
	}
	return plan
}

// gateCharges are the placements a plan pretends, on the session's shares.
type gateCharges struct {
	p       *vgpuPlugin
	charged []vapi.TaskID
}

// probeID names a pretended placement apart from every real task.
func probeID(task vapi.TaskID) vapi.TaskID { return "tessera-queue-gate/" + task }

// admit asks the queue's share for one task and, if it admits, charges it.
func (c *gateCharges) admit(queue vapi.QueueID, task vapi.TaskID, cost fairshare.Amount) (bool, string) {
	ok, why := c.p.shares.Admit(queue, cost)
	if ok {
		id := probeID(task)
		c.p.shares.Place(id, queue, cost, cost)
		c.charged = append(c.charged, id)
	}
	return ok, why
}

func (c *gateCharges) release() {
	for i := len(c.charged) - 1; i >= 0; i-- {
		c.p.shares.Release(c.charged[i], false)
	}
	c.charged = nil
}

// ungatedPending charges the pending vGPU pods without gates that their queue admits:
// among them, those ungated in an earlier session and not yet placed.
func (c *gateCharges) ungatedPending() {
	for _, job := range c.p.ssn.Jobs {
		for _, t := range job.TaskStatusIndex[vapi.Pending] {
			if gatedBy(t.Pod) != gateNone {
				continue
			}
			if tr := c.p.request(t); tr != nil && tr.Err == nil {
				c.admit(job.Queue, t.UID, c.p.shares.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly))
			}
		}
	}
}

// gang returns the members of g whose gate comes off, and why the rest stay ("" when
// none stays for a reason a user must see). A member whose request cannot be read is
// ungated with the rest: the scheduler then says what is wrong with it on the pod.
func (c *gateCharges) gang(g gatedJob) ([]*vapi.TaskInfo, string) {
	type member struct {
		task *vapi.TaskInfo
		cost fairshare.Amount
	}
	var members []member
	for _, t := range g.tasks {
		tr := c.p.request(t)
		if tr.Err != nil {
			return g.tasks, ""
		}
		members = append(members, member{t, c.p.shares.Cost(tr.Req.Containers, tr.Req.Tenancy().IdleOnly)})
	}
	// Cheapest first, as enqueue judges a gang's minimum.
	sort.SliceStable(members, func(i, j int) bool { return fairshare.Smaller(members[i].cost, members[j].cost) })
	costs := make([]fairshare.Amount, len(members))
	for i, m := range members {
		costs[i] = m.cost
	}
	job := g.job
	if why := c.p.shares.BeyondCapability(job.Queue, costs, max(g.need, 1)); why != "" {
		return nil, fmt.Sprintf("%s: %s; %s", PluginName, why, behindGate(len(members), g.need))
	}
	mark := len(c.charged)
	var open []*vapi.TaskInfo
	for i, m := range members {
		ok, why := c.admit(job.Queue, m.task.UID, m.cost)
		switch {
		case ok:
			open = append(open, m.task)
		case i < g.need:
			// The gang's minimum does not fit its queue's share: none of it goes, unless
			// the cluster's free cards could not hold it either.
			for _, id := range c.charged[mark:] {
				c.p.shares.Release(id, false)
			}
			c.charged = c.charged[:mark]
			if !c.roomFor(costs, g.need) {
				return g.tasks, ""
			}
			return nil, why + "; " + behindGate(len(members), g.need)
		case len(open) == 0:
			return nil, why + "; " + behindGate(len(members), g.need)
		default:
			// Members beyond the minimum go one by one as the share admits them.
			return open, ""
		}
	}
	return open, ""
}

// roomFor reports whether the cards no queue holds could take the need cheapest of
// costs. When they could not, the gang waits for cards as much as for its queue: a new
// node would raise every queue's share with the supply, and this queue's too, so the
// gang is not kept behind the gate, where an autoscaler cannot see it. A queue that
// holds its share of a full cluster is the common case: with one queue, its share is
// the whole cluster.
func (c *gateCharges) roomFor(costs []fairshare.Amount, need int) bool {
	sum := shares.Cheapest(costs, max(need, 1))
	return sum.Within(fairshare.OpenUnasked(c.p.shares.Free(), sum))
}

func behindGate(pods, need int) string {
	return fmt.Sprintf("the gang's %d gated pods wait behind scheduling gate %s (%d needed together for its minimum)", pods, queueShareGate, need)
}
