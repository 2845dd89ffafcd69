package ui

import (
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Amount is card memory (MiB) and compute (card percent points, 100 a whole card),
// and MIG slices (the compute slices of whole MIG instances, a 3g.40gb instance is 3;
// absent when zero). -1 stands for no limit in a capability.
type Amount struct {
	MemoryMiB float64 `json:"memoryMiB"`
	Cores     float64 `json:"cores"`
	MIGSlices float64 `json:"migSlices,omitempty"`
}

func amountOf(a fairshare.Amount) Amount {
	finite := func(v float64) float64 {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return -1
		}
		return v
	}
	return Amount{MemoryMiB: finite(a.MemoryMiB), Cores: finite(a.Cores), MIGSlices: finite(a.MIGSlices)}
}

// QueueShare is one Volcano queue as the vgpu plugin's queue share sees it: what it
// deserves of the schedulable cards by weight, what it holds and what it asks.
type QueueShare struct {
	Queue       string `json:"queue"`
	Colour      string `json:"colour"`
	State       string `json:"state,omitempty"`
	Weight      int32  `json:"weight"`
	TotalWeight int32  `json:"totalWeight"`
	Capability  Amount `json:"capability"`
	Deserved    Amount `json:"deserved"`
	// Held is what its bound vGPU pods hold; Asked what its pending ones ask.
	Held  Amount `json:"held"`
	Asked Amount `json:"asked"`
	// Below: it holds less than it deserves where its pending pods ask, so reclaim
	// may act for it. Over: it holds more than it deserves (it borrowed idle cards).
	Below bool `json:"below"`
	Over  bool `json:"over"`
	// Running and Waiting count its bound and pending vGPU pods.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// MIG: it holds or asks for MIG instances, so the page shows its MIG slices
	// (Deserved, Held and Asked .MIGSlices) beside card memory and cores.
	MIG bool `json:"mig,omitempty"`
}

// queue is a decoded Volcano Queue.
type queue struct {
	spec  cli.QueueSpec
	state string
}

// queueObject is the part of a Volcano Queue the page reads.
type queueObject struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Weight     int32                        `json:"weight"`
		Capability map[string]resource.Quantity `json:"capability"`
		Guarantee  struct {
			Resource map[string]resource.Quantity `json:"resource"`
		} `json:"guarantee"`
	} `json:"spec"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
}

// decodeQueues reads the queues' weights and card capabilities and guarantees
// (volcano.sh/vgpu-memory in MiB, volcano.sh/vgpu-cores in card percent), by name.
func decodeQueues(objs []*unstructured.Unstructured, args pluginargs.Args) []queue {
	mem, cores := string(args.Resources.Memory), string(args.Resources.Cores)
	var out []queue
	for _, u := range objs {
		var o queueObject
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
			klog.V(2).InfoS("Skipping a Volcano queue the page cannot read", "queue", u.GetName(), "err", err)
			continue
		}
		q := queue{spec: cli.QueueSpec{Name: o.Metadata.Name, Weight: o.Spec.Weight, Capability: fairshare.Unlimited}, state: o.Status.State}
		if v, ok := o.Spec.Capability[mem]; ok {
			q.spec.Capability.MemoryMiB = float64(v.Value())
		}
		if v, ok := o.Spec.Capability[cores]; ok {
			q.spec.Capability.Cores = float64(v.Value())
		}
		if v, ok := o.Spec.Guarantee.Resource[mem]; ok {
			q.spec.Guarantee.MemoryMiB = float64(v.Value())
		}
		if v, ok := o.Spec.Guarantee.Resource[cores]; ok {
			q.spec.Guarantee.Cores = float64(v.Value())
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].spec.Name < out[j].spec.Name })
	return out
}

// queueShares divides the schedulable cards among the queues by the plugin's rules:
// healthy, non-MIG cards of ready nodes that are not cordoned, and the MIG slices of
// the healthy, uncordoned MIG cards of those nodes (cli.Snapshot.MIGSupply); a queue's demand is
// what its bound vGPU pods hold plus what its pending ones ask, a memory percentage
// costed on a card of the mean size and an idle-only pod's cards whole.
func queueShares(snap *cli.Snapshot, nodes []cli.NodeView, queues []queue) []QueueShare {
	if len(queues) == 0 {
		return []QueueShare{}
	}
	cordoned := map[string]bool{}
	for i := range snap.Nodes {
		cordoned[snap.Nodes[i].Name] = snap.Nodes[i].Spec.Unschedulable
	}
	var total fairshare.Amount
	var physical, cards int64
	capacity := map[string]int64{}
	for _, n := range nodes {
		for _, c := range n.Cards {
			if !c.MIG {
				capacity[c.UUID] = c.CapacityMiB
			}
			if n.Status == cli.StatusReady && !cordoned[n.Name] && c.Healthy && !c.MIG {
				total = total.Add(fairshare.Amount{MemoryMiB: float64(c.CapacityMiB), Cores: 100})
				physical += c.MemoryMiB
				cards++
			}
		}
	}
	refMiB := int64(0)
	if cards > 0 {
		refMiB = physical / cards
	}
	charge := cli.ShareCards(refMiB, snap.Args.MemoryOversubscription, capacity)
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = n.Status == cli.StatusReady
	}
	total.MIGSlices, charge.InstanceSlices = snap.MIGSupply(func(n *corev1.Node) bool { return ready[n.Name] && !n.Spec.Unschedulable })
	held := map[string]fairshare.Amount{}
	asked := map[string]fairshare.Amount{}
	shares := make([]QueueShare, len(queues))
	index := map[string]*QueueShare{}
	var weight int32
	for i, q := range queues {
		// Volcano queues have no resource name for MIG slices: no capability to show.
		shares[i] = QueueShare{Queue: q.spec.Name, Colour: cli.QueueColourOf(q.spec.Name), State: q.state, Weight: q.spec.Weight,
			Capability: amountOf(q.spec.Capability.Cards())}
		index[q.spec.Name] = &shares[i]
		weight += q.spec.Weight
	}
	for i := range snap.Pods {
		p := &snap.Pods[i]
		name := cli.Queue(p)
		s := index[name]
		if s == nil || !snap.Args.Resources.HasVGPURequest(p) {
			continue
		}
		if p.Spec.NodeName != "" {
			if cs, _, ok, err := (*api.Decoders)(nil).PodCards(p, snap.Args.Resources); ok && err == nil {
				held[name] = held[name].Add(charge.Assigned(cs, api.HoldsIdleOnly(p.Annotations)))
				s.Running++
			}
			continue
		}
		if waiting(p) {
			s.Waiting++
			if req, err := snap.Args.Request(p); err == nil {
				asked[name] = asked[name].Add(charge.Requested(req.Containers, req.Tenancy().IdleOnly))
			}
		}
	}
	claims := make([]fairshare.Claim, len(queues))
	for i, q := range queues {
		n := q.spec.Name
		claims[i] = fairshare.Claim{Weight: float64(q.spec.Weight), Request: held[n].Add(asked[n]), Capability: q.spec.Capability,
			Guarantee: q.spec.Guarantee}
	}
	for i, d := range fairshare.Divide(total, claims) {
		s, n := &shares[i], queues[i].spec.Name
		s.TotalWeight = weight
		s.Deserved, s.Held, s.Asked = amountOf(d), amountOf(held[n]), amountOf(asked[n])
		s.Below = fairshare.Below(held[n], d, asked[n])
		s.Over = !held[n].Within(d)
		s.MIG = held[n].MIGSlices > 0 || asked[n].MIGSlices > 0
	}
	return shares
}

// waiting: the pod is not bound and not on its way out.
func waiting(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodPending
}
