package vgpu

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"volcano.sh/apis/pkg/apis/scheduling"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/mig"
)

// Dynamic MIG, the scheduler's half: at session open, pending pods that ask for MIG
// instances no card has free may get an idle card of an opted-in node re-partitioned.
// The scheduler writes the wanted layout on the Node (api.AnnotationMIGPlan), the
// node's agent applies it and answers (api.AnnotationMIGPlanStatus). While a plan is
// outstanding the card takes no pod; once its status is final the plan is removed
// (or superseded by the node's next plan) and the card is used as its published
// layout says.

const (
	// migPlanTimeout is how long a plan without an answer blocks its card; then the
	// plan is removed and the card may be planned again.
	migPlanTimeout = 5 * time.Minute
	// migPlanRetryAfter is how long a card whose plan was refused or failed waits
	// before another plan: a busy card is likely to stay busy for a while.
	migPlanRetryAfter = 2 * time.Minute
	// migPlanEvent is the reason of the PodGroup events that announce a plan.
	migPlanEvent = "MIGRepartition"
)

// migNodePlan is what a node's plan annotations say.
type migNodePlan struct {
	node      *corev1.Node
	optedIn   bool
	plan      *api.MIGPlan
	planValue string
	status    *api.MIGPlanStatus
}

// outstanding reports whether the node's plan still waits for its agent.
func (n migNodePlan) outstanding(now time.Time) bool {
	if n.plan == nil || !n.optedIn {
		return false
	}
	if n.status != nil && n.status.ID == n.plan.ID && n.status.Final() {
		return false
	}
	return now.Sub(n.plan.CreatedAt()) < migPlanTimeout
}

// backingOff reports whether the card's last plan failed or was refused recently.
func (n migNodePlan) backingOff(card string, now time.Time) bool {
	s := n.status
	return s != nil && s.Card == card && s.Outcome != api.MIGPlanApplied && now.Sub(s.At()) < migPlanRetryAfter
}

// readMIGNodePlan reads a node's plan annotations; a value that does not decode is
// logged and treated as absent (the agent refuses it too).
func readMIGNodePlan(node *corev1.Node) migNodePlan {
	n := migNodePlan{node: node, optedIn: node.Annotations[api.AnnotationMIGRepartition] == "true"}
	if v, ok := node.Annotations[api.AnnotationMIGPlan]; ok {
		n.planValue = v
		p, err := api.DecodeMIGPlan(v)
		if err != nil {
			klog.ErrorS(err, "Ignoring the node's MIG plan", "node", node.Name)
		}
		n.plan = p
	}
	if v, ok := node.Annotations[api.AnnotationMIGPlanStatus]; ok {
		s, err := api.DecodeMIGPlanStatus(v)
		if err != nil {
			klog.ErrorS(err, "Ignoring the node's MIG plan status", "node", node.Name)
		}
		n.status = s
	}
	return n
}

// openMIGPlans runs at session open, after the ledger is built and before any hook:
// it keeps pods off cards being re-partitioned, clears answered plans and writes new
// ones.
func (p *vgpuPlugin) openMIGPlans(ssn *framework.Session) {
	now := p.now()
	demand := p.pendingMIGDemand(ssn)
	var nodes []migNodeView
	var writes []migPlanWrite
	blocked := map[string]migBlock{} // card UUID -> the plan it waits for
	states := map[string]migNodePlan{}
	for _, name := range sortedNodeNames(ssn) {
		node := ssn.Nodes[name].Node
		if node == nil {
			continue
		}
		_, hasMIG := node.Annotations[api.AnnotationMIGInstances]
		_, hasPlan := node.Annotations[api.AnnotationMIGPlan]
		if !hasMIG && !hasPlan {
			continue
		}
		st := readMIGNodePlan(node)
		states[name] = st
		busy := node.Spec.Unschedulable
		switch {
		case st.outstanding(now):
			blocked[st.plan.Card] = migBlock{why: migWaitText(name, st.plan), plan: st.plan}
			busy = true
		case hasPlan:
			// Answered, expired, unreadable or on a node that no longer opts in: the
			// card is free again. The removal is dropped if the node gets a new plan.
			writes = append(writes, migPlanWrite{node: node, old: st.planValue})
		}
		if len(demand) == 0 || !hasMIG {
			continue
		}
		if n := p.ledger.Clone(name); n != nil {
			nodes = append(nodes, migNodeOf(n, st, busy, node.Spec.Unschedulable, now))
		}
	}
	planned := chooseMIGPlans(nodes, demand)
	for _, pl := range planned {
		plan := &api.MIGPlan{ID: migPlanID(pl.Node, pl.Card.UUID, now), Card: pl.Card.UUID, Profiles: pl.Choice.Profiles,
			Created: now.UTC().Format(time.RFC3339)}
		enc, err := api.EncodeMIGPlan(plan)
		if err != nil {
			klog.ErrorS(err, "Cannot encode a MIG plan", "node", pl.Node, "card", pl.Card.UUID)
			continue
		}
		node := states[pl.Node].node
		writes = supersede(writes, migPlanWrite{node: node, old: states[pl.Node].planValue, value: enc})
		why := migWaitText(pl.Node, plan)
		blocked[pl.Card.UUID] = migBlock{why: why, plan: plan}
		klog.InfoS("Re-partitioning an idle MIG card for pending pods", "node", pl.Node, "card", pl.Card.UUID, "index", pl.Card.Index,
			"from", pl.Card.Current.String(), "to", pl.Choice.Layout.String(), "plan", plan.ID, "instancesServed", len(pl.Served))
		p.announceMIGPlan(ssn, pl, why)
	}
	if len(blocked) > 0 {
		// Only while the session opens, before any hook reads the ledger.
		p.ledger.EachCard(func(_ string, c *placement.CardState) {
			if b, ok := blocked[c.UUID]; ok {
				b.apply(c)
			}
		})
	}
	startMIGPlanWrites(ssn.KubeClient(), writes)
	if len(demand) > 0 || len(planned) > 0 || len(blocked) > 0 {
		klog.V(3).InfoS("vgpu MIG re-partitioning", "pendingInstances", len(demand), "newPlans", len(planned),
			"cardsBeingRepartitioned", len(blocked), "planWrites", len(writes))
	}
}

// migBlock is a card being re-partitioned.
type migBlock struct {
	why  string
	plan *api.MIGPlan
}

// apply shows the card in the session's ledger as it will be: the plan's instances,
// none of which takes a pod until the agent has applied the plan and published the
// real layout. A pod that only the new layout can hold is then told that it waits for
// the plan (the cordon's reason), not that it can never run.
func (b migBlock) apply(c *placement.CardState) {
	if c.Cordon == nil {
		c.Cordon = &api.CardCordon{Reason: b.why}
	}
	future := make([]api.MIGInstance, len(b.plan.Profiles))
	for i, name := range b.plan.Profiles {
		future[i] = api.MIGInstance{UUID: fmt.Sprintf("MIG-planned-%s-%d", b.plan.ID, i), Profile: name, GI: i, Start: i}
	}
	c.MIGInstances = future
}

// migNodeOf is the chooser's view of one node's cards in MIG mode.
// A cordoned node's free instances are no supply: no pod goes there.
func migNodeOf(n *placement.Node, st migNodePlan, busy, cordoned bool, now time.Time) migNodeView {
	v := migNodeView{Name: n.Name, Node: st.node, OptedIn: st.optedIn, Busy: busy}
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.MIG {
			continue
		}
		cv := migCardView{UUID: c.UUID, Index: c.Index, Model: c.Model, Free: map[string]int{}}
		known := c.MIGInstances != nil
		beingChanged := st.outstanding(now) && st.plan.Card == c.UUID
		usable := c.Healthy && c.Cordon == nil && known && !beingChanged && !cordoned
		held := c.Used.Tenants > 0
		starts := map[int]bool{}
		for _, in := range c.MIGInstances {
			if n.MIGHolders(in.UUID) > 0 {
				held = true
			} else if usable {
				cv.Free[in.Profile]++
			}
			if !starts[in.Start] { // one GPU instance may carry several compute instances
				starts[in.Start] = true
				cv.Current = append(cv.Current, mig.Instance{Profile: in.Profile, Start: in.Start})
			}
		}
		sort.Slice(cv.Current, func(i, j int) bool { return cv.Current[i].Start < cv.Current[j].Start })
		cv.Plannable = usable && !held && !st.backingOff(c.UUID, now)
		v.Cards = append(v.Cards, cv)
	}
	return v
}

// pendingMIGDemand lists the MIG instances pending, schedulable pods of admitted jobs
// (PodGroup past Pending) ask for: highest job priority first, then oldest, one entry
// per instance, each with where its pod may go.
func (p *vgpuPlugin) pendingMIGDemand(ssn *framework.Session) []migDemand {
	limits := migLimitsBook{}
	type pending struct {
		prio    int32
		created time.Time
		key     string
		d       []migDemand
	}
	var all []pending
	for _, job := range ssn.Jobs {
		if job.PodGroup == nil || job.PodGroup.Status.Phase == scheduling.PodGroupPending {
			continue // not admitted by enqueue yet: its queue may never let it run
		}
		for _, task := range job.TaskStatusIndex[vapi.Pending] {
			if task.Pod == nil || task.Pod.Spec.NodeName != "" || gatedBy(task.Pod) != gateNone || !p.args.Resources.HasVGPURequest(task.Pod) {
				continue
			}
			r := p.request(task)
			if r == nil || r.Err != nil || r.Req == nil || r.Req.Options.MIGProfile == "" {
				continue
			}
			pd := pending{prio: job.Priority, created: task.Pod.CreationTimestamp.Time, key: task.Namespace + "/" + task.Name}
			where := limits.of(task.Pod, &r.Req.Options)
			for _, c := range r.Req.Containers {
				for k := 0; k < c.Cards; k++ {
					pd.d = append(pd.d, migDemand{Profile: r.Req.Options.MIGProfile, Job: string(job.UID), Pod: pd.key, Where: where})
				}
			}
			all = append(all, pd)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.prio != b.prio {
			return a.prio > b.prio
		}
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		return a.key < b.key
	})
	var out []migDemand
	for _, pd := range all {
		out = append(out, pd.d...)
	}
	return out
}

// migLimitsBook hands out one migPodLimits per distinct set of limits, for one
// session's demand.
type migLimitsBook map[string]*migPodLimits

// of returns where the pod may go; nil for a pod without node selector, required
// node affinity, tolerations or card filters.
func (b migLimitsBook) of(pod *corev1.Pod, o *api.PodOptions) *migPodLimits {
	var required *corev1.NodeSelector
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	filters := api.PodOptions{TypeInclude: o.TypeInclude, TypeExclude: o.TypeExclude, UUIDInclude: o.UUIDInclude, UUIDExclude: o.UUIDExclude}
	if len(pod.Spec.NodeSelector) == 0 && required == nil && len(pod.Spec.Tolerations) == 0 &&
		len(filters.TypeInclude)+len(filters.TypeExclude)+len(filters.UUIDInclude)+len(filters.UUIDExclude) == 0 {
		return nil
	}
	// encoding/json writes map keys sorted: equal limits give equal keys.
	key, err := json.Marshal(struct {
		Selector                       map[string]string
		Required                       *corev1.NodeSelector
		Tolerations                    []corev1.Toleration
		Types, NoTypes, UUIDs, NoUUIDs []string
	}{pod.Spec.NodeSelector, required, pod.Spec.Tolerations, filters.TypeInclude, filters.TypeExclude, filters.UUIDInclude, filters.UUIDExclude})
	if err != nil {
		key = []byte(pod.Namespace + "/" + pod.Name) // not shared, still right
	}
	if l, ok := b[string(key)]; ok {
		return l
	}
	l := &migPodLimits{Affinity: nodeaffinity.GetRequiredNodeAffinity(pod), Tolerations: pod.Spec.Tolerations, Filters: filters}
	b[string(key)] = l
	return l
}

// announceMIGPlan tells each served job's PodGroup that its pods wait for the plan.
func (p *vgpuPlugin) announceMIGPlan(ssn *framework.Session, pl migPlanned, why string) {
	seen := map[string]bool{}
	for _, d := range pl.Served {
		if seen[d.Job] {
			continue
		}
		seen[d.Job] = true
		if job, ok := ssn.Jobs[vapi.JobID(d.Job)]; ok && job.PodGroup != nil {
			ssn.RecordPodGroupEvent(job.PodGroup, corev1.EventTypeNormal, migPlanEvent, why)
		}
	}
}

// migWaitText is why pods wait: "waiting for gpu-e's card GPU-… to be re-partitioned
// to 3g.40gb+1g.10gb (MIG plan …)".
func migWaitText(node string, plan *api.MIGPlan) string {
	return fmt.Sprintf("waiting for %s's card %s to be re-partitioned to %s (MIG plan %s)", node, plan.Card,
		strings.Join(plan.Profiles, "+"), plan.ID)
}

// migPlanID names a plan: its time and a hash of node and card, short enough for the
// codec's 64 bytes whatever the node's name.
func migPlanID(node, card string, now time.Time) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node + "/" + card))
	return fmt.Sprintf("%d-%08x", now.Unix(), h.Sum32())
}

func sortedNodeNames(ssn *framework.Session) []string {
	names := make([]string, 0, len(ssn.Nodes))
	for name, ni := range ssn.Nodes {
		if ni != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}
