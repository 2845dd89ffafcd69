package sim

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Cluster is a live cluster as `tessera simulate --from-cluster` reads it.
type Cluster struct {
	// Now is when it was read: node heartbeats are judged against it.
	Now  time.Time
	Args pluginargs.Args
	// Nodes, Pods (non-terminated), PodGroups and Queues as the API server lists them.
	Nodes     []corev1.Node
	Pods      []corev1.Pod
	PodGroups []schedulingv1.PodGroup
	Queues    []schedulingv1.Queue
}

// Live is the scenario made of a cluster: its pending vGPU pods, and what the
// conversion left out, in words.
type Live struct {
	Scenario *Scenario
	Pending  []PendingPod
	Notes    []string
}

// PendingPod is a pending vGPU pod of the cluster and the job that stands for its
// PodGroup in the scenario.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"pod"`
	Queue     string `json:"queue"`
	// Job is the scenario job's key (namespace/podgroup); MinMember its gang size.
	Job       string `json:"gang"`
	MinMember int32  `json:"minMember"`
}

// liveSessions is how many sessions a live scenario runs: enough for jobs that wait
// on others' binds, few enough to answer in seconds.
const liveSessions = 5

// FromCluster turns a cluster into a scenario: each node with a usable Tessera (or
// HAMi) inventory becomes a host with its cards; the vGPU pods of each PodGroup
// become one job whose running members keep the cards they hold and whose pending
// members are what the sessions place; queues keep weight, reclaimable and the card
// dimensions of capability and guarantee; the plugin runs with the cluster's
// arguments. It is a pure function of the cluster.
func FromCluster(c *Cluster) *Live {
	l := &Live{Scenario: &Scenario{Sessions: liveSessions, Plugin: pluginMap(c.Args)}}
	hosts := map[string]bool{}
	nodes := append([]corev1.Node(nil), c.Nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for i := range nodes {
		n := &nodes[i]
		h, note := hostOf(n, c.Now, c.Args.HeartbeatTimeout)
		if note != "" {
			l.Notes = append(l.Notes, note)
		}
		if h != nil {
			l.Scenario.Hosts = append(l.Scenario.Hosts, *h)
			hosts[h.Name] = true
		}
	}
	queues := map[string]bool{}
	for _, q := range c.Queues {
		sq, notes := queueOf(q, c.Args.Resources)
		l.Scenario.Queues = append(l.Scenario.Queues, sq)
		l.Notes = append(l.Notes, notes...)
		queues[q.Name] = true
	}
	sort.Slice(l.Scenario.Queues, func(i, j int) bool { return l.Scenario.Queues[i].Name < l.Scenario.Queues[j].Name })
	groups := map[string]*schedulingv1.PodGroup{}
	for i := range c.PodGroups {
		pg := &c.PodGroups[i]
		groups[pg.Namespace+"/"+pg.Name] = pg
	}
	for _, g := range gangsOf(c.Pods, c.Args.Resources) {
		jobs, pending, notes := jobsOf(g, groups[g.key], c.Args, hosts, queues)
		l.Scenario.Jobs = append(l.Scenario.Jobs, jobs...)
		l.Pending = append(l.Pending, pending...)
		l.Notes = append(l.Notes, notes...)
	}
	return l
}

// hostOf is a node's host, or nil with the reason the scheduler cannot use its cards
// ("" for a node without vGPU cards).
func hostOf(n *corev1.Node, now time.Time, heartbeat time.Duration) (*Host, string) {
	inv, err := api.ReadNodeInventory(n, now, heartbeat)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("node %s left out: the scheduler cannot use its cards: %v", n.Name, err)
	case inv == nil || len(inv.Cards) == 0:
		return nil, ""
	}
	h := &Host{Name: n.Name, Unschedulable: n.Spec.Unschedulable}
	var cordoned []string
	for _, card := range inv.Cards {
		if card.Cordon != nil {
			// A cordoned card takes no new task: in the simulation it is unhealthy.
			card.Healthy = false
			cordoned = append(cordoned, fmt.Sprint(card.Index))
		}
		card.Cordon, card.MIGInstances, card.ContextReserveMiB = nil, nil, 0
		h.Cards = append(h.Cards, card)
	}
	note := ""
	if len(cordoned) > 0 {
		note = fmt.Sprintf("node %s: cordoned cards %s are simulated as unhealthy (they take no new pod)", n.Name, strings.Join(cordoned, ","))
	}
	return h, note
}

// queueOf is a Volcano queue in the scenario: the card resources of its capability
// and guarantee under Tessera's default resource names, which the simulated pods use.
func queueOf(q schedulingv1.Queue, names api.ResourceNames) (Queue, []string) {
	out := Queue{Name: q.Name, Weight: q.Spec.Weight, Reclaimable: q.Spec.Reclaimable}
	if out.Weight < 1 {
		out.Weight = 1 // Volcano's default for a queue without a weight
	}
	var notes []string
	cardResources := func(what string, in corev1.ResourceList) corev1.ResourceList {
		if len(in) == 0 {
			return nil
		}
		to := map[corev1.ResourceName]corev1.ResourceName{names.Number: api.ResourceNumber, names.Memory: api.ResourceMemory,
			names.MemoryPercentage: api.ResourceMemoryPercentage, names.Cores: api.ResourceCores}
		out := corev1.ResourceList{}
		var dropped []string
		for k, v := range in {
			if d, ok := to[k]; ok {
				out[d] = v.DeepCopy()
			} else {
				dropped = append(dropped, string(k))
			}
		}
		if len(dropped) > 0 {
			sort.Strings(dropped)
			notes = append(notes, fmt.Sprintf("queue %s: %s of %s is not simulated (the simulation models card resources only)",
				q.Name, what, strings.Join(dropped, ", ")))
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	out.Capability = cardResources("capability", q.Spec.Capability)
	out.Guarantee = cardResources("guarantee", q.Spec.Guarantee.Resource)
	return out, notes
}

// pluginMap is the vgpu plugin's arguments as volcano-scheduler.conf writes them,
// without the resource names: the simulated pods use the default ones.
func pluginMap(a pluginargs.Args) map[string]any {
	return map[string]any{
		pluginargs.KeyNodePolicy:             string(a.NodePolicy),
		pluginargs.KeyCardPolicy:             string(a.CardPolicy),
		pluginargs.KeyWeight:                 a.Weight,
		pluginargs.KeyTopologyWeight:         a.TopologyWeight,
		pluginargs.KeyMemoryOversubscription: a.MemoryOversubscription,
		pluginargs.KeyHeartbeatTimeout:       a.HeartbeatTimeout.String(),
		pluginargs.KeyPendingTTL:             a.PendingTTL.String(),
		pluginargs.KeyQueueShare:             a.QueueShare,
	}
}

// podGang is the vGPU pods of one PodGroup (or one pod that names none).
type podGang struct {
	key, namespace, name string
	pods                 []*corev1.Pod
}

// gangsOf groups the vGPU pods by the PodGroup they name, in key order.
func gangsOf(pods []corev1.Pod, names api.ResourceNames) []*podGang {
	byKey := map[string]*podGang{}
	var out []*podGang
	for i := range pods {
		p := &pods[i]
		if !names.HasVGPURequest(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		name := p.Annotations[schedulingv1.KubeGroupNameAnnotationKey]
		if name == "" {
			name = p.Name // a pod alone: a gang of one
		}
		key := p.Namespace + "/" + name
		g := byKey[key]
		if g == nil {
			g = &podGang{key: key, namespace: p.Namespace, name: name}
			byKey[key] = g
			out = append(out, g)
		}
		g.pods = append(g.pods, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	for _, g := range out {
		sort.SliceStable(g.pods, func(i, j int) bool { return g.pods[i].Name < g.pods[j].Name })
	}
	return out
}

// jobsOf is a gang as a scenario job (none or one): its running members with the
// cards they hold, then its pending members with their request. Pending members
// that cannot be simulated are left out with a note; the running ones stay, so that
// their cards stay held.
func jobsOf(g *podGang, pg *schedulingv1.PodGroup, args pluginargs.Args, hosts, queues map[string]bool) ([]Job, []PendingPod, []string) {
	var notes []string
	job := Job{Name: g.name, Namespace: g.namespace, Queue: "default", MinAvailable: 1}
	if pg != nil {
		job.MinAvailable = pg.Spec.MinMember
		if pg.Spec.Queue != "" {
			job.Queue = pg.Spec.Queue
		}
	} else if q := g.pods[0].Annotations["volcano.sh/queue-name"]; q != "" {
		job.Queue = q
	}
	var bound, pending []*corev1.Pod
	var shape *Job
	for _, p := range g.pods {
		if p.Spec.NodeName != "" {
			m, err := memberOf(p, args.Resources)
			switch {
			case err != nil:
				notes = append(notes, fmt.Sprintf("pod %s/%s: its cards are not accounted: %v", p.Namespace, p.Name, err))
			case !hosts[m.Node]:
				notes = append(notes, fmt.Sprintf("pod %s/%s: its node %s is left out, so are its cards", p.Namespace, p.Name, m.Node))
			default:
				job.Bound = append(job.Bound, m)
				bound = append(bound, p)
			}
			continue
		}
		s, err := shapeOf(p, args)
		if err != nil {
			notes = append(notes, fmt.Sprintf("pod %s/%s: not simulated: %v", p.Namespace, p.Name, err))
			continue
		}
		switch {
		case shape == nil:
			shape = s
			pending = append(pending, p)
		case !sameShape(shape, s):
			notes = append(notes, fmt.Sprintf("pod %s/%s: not simulated: its gang %s mixes vGPU requests, the simulation gives a gang one shape",
				p.Namespace, p.Name, g.key))
		default:
			pending = append(pending, p)
		}
	}
	if len(pending) > 0 && !queues[job.Queue] && job.Queue != "default" {
		for _, p := range pending {
			notes = append(notes, fmt.Sprintf("pod %s/%s: not simulated: queue %q does not exist, so Volcano does not schedule it", p.Namespace, p.Name, job.Queue))
		}
		pending = nil
	}
	if !queues[job.Queue] {
		job.Queue = "default"
	}
	if len(pending) == 0 {
		shape = nil
	}
	if shape == nil {
		if len(bound) == 0 {
			return nil, nil, notes
		}
		// Only running members: they hold cards; the shape of the first says what they asked.
		s, err := shapeOf(bound[0], args)
		if err != nil {
			s = &Job{Cards: int64(len(job.Bound[0].Cards))}
		}
		shape = s
	}
	job.Cards, job.MemoryMiB, job.MemoryPct, job.Cores, job.Annotations = shape.Cards, shape.MemoryMiB, shape.MemoryPct, shape.Cores, shape.Annotations
	job.Replicas = len(bound) + len(pending)
	for _, p := range append(bound, pending...) {
		job.Pods = append(job.Pods, p.Name)
	}
	if int(job.MinAvailable) > job.Replicas {
		// Volcano never places it (other members may be CPU pods, or finished): its
		// pending members are left out, its running ones keep their cards.
		for _, p := range pending {
			notes = append(notes, fmt.Sprintf("pod %s/%s: not simulated: its gang %s has minMember %d but only %d vGPU pods that can be simulated",
				p.Namespace, p.Name, g.key, job.MinAvailable, job.Replicas))
		}
		pending = nil
		job.Replicas, job.Pods, job.MinAvailable = len(bound), job.Pods[:len(bound)], int32(len(bound))
		if job.Replicas == 0 {
			return nil, nil, notes
		}
	}
	out := make([]PendingPod, len(pending))
	for i, p := range pending {
		out[i] = PendingPod{Namespace: p.Namespace, Name: p.Name, Queue: job.Queue, Job: job.Key(), MinMember: job.MinAvailable}
	}
	return []Job{job}, out, notes
}

// memberOf is a bound pod's node and cards, all its containers' cards together.
func memberOf(p *corev1.Pod, names api.ResourceNames) (Member, error) {
	cs, _, ok, err := (*api.Decoders)(nil).PodCards(p, names)
	switch {
	case err != nil:
		return Member{}, err
	case !ok:
		return Member{}, fmt.Errorf("bound to %s without an assignment", p.Spec.NodeName)
	}
	m := Member{Node: p.Spec.NodeName}
	for _, c := range cs {
		m.Cards = append(m.Cards, c.Cards...)
	}
	if len(m.Cards) == 0 {
		return Member{}, fmt.Errorf("its assignment on %s holds no card", p.Spec.NodeName)
	}
	return m, nil
}

// shapeOf is a pending pod's request as a job's shape, parsed by the plugin's own
// rules; its Tessera annotations (card types, policies, QoS) go with it.
func shapeOf(p *corev1.Pod, args pluginargs.Args) (*Job, error) {
	req, err := args.Request(p)
	if err != nil {
		return nil, err
	}
	if len(req.Containers) != 1 {
		return nil, fmt.Errorf("%d containers ask for vGPU resources; the simulation models one", len(req.Containers))
	}
	c := req.Containers[0]
	j := &Job{Cards: int64(c.Cards), MemoryMiB: c.MemoryMiB, MemoryPct: int64(c.MemoryPercent), Cores: int64(c.Cores)}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, api.Prefix) && !placementRecord(k) {
			if j.Annotations == nil {
				j.Annotations = map[string]string{}
			}
			j.Annotations[k] = v
		}
	}
	return j, nil
}

// placementRecord: annotations the plugin and the node agent write, not the pod's asks.
func placementRecord(key string) bool {
	switch key {
	case api.AnnotationAssignment, api.AnnotationAssignedAt, api.AnnotationHandoff, api.AnnotationHandoffMessage,
		api.AnnotationAssignmentSignature:
		return true
	}
	return false
}

func sameShape(a, b *Job) bool {
	return a.Cards == b.Cards && a.MemoryMiB == b.MemoryMiB && a.MemoryPct == b.MemoryPct && a.Cores == b.Cores &&
		reflect.DeepEqual(a.Annotations, b.Annotations)
}
