package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// QueueSpec is what the CLI reads of a Volcano Queue: its weight and its card
// capability and guarantee (volcano.sh/vgpu-memory in MiB, volcano.sh/vgpu-cores in
// card percent).
type QueueSpec struct {
	Name       string           `json:"name"`
	Weight     int32            `json:"weight"`
	Capability fairshare.Amount `json:"capability"`
	Guarantee  fairshare.Amount `json:"guarantee"`
}

// QueueView is the pod's queue as the vgpu plugin's queue share sees it.
type QueueView struct {
	Queue       string `json:"queue"`
	Weight      int32  `json:"weight"`
	TotalWeight int32  `json:"totalWeight"`
	// Deserved is the queue's weighted max-min share of the schedulable cards.
	Deserved Amount `json:"deserved"`
	// Held is what its bound vGPU pods hold; Asked what its pending ones ask.
	Held  Amount `json:"held"`
	Asked Amount `json:"asked"`
	// Below: the queue holds less than it deserves, so reclaim may act for it.
	Below bool `json:"below"`
	// Reclaimable counts, per queue above its share, the vGPU pods reclaim could
	// evict for this one (before each job's minAvailable is taken into account).
	Reclaimable map[string]int `json:"reclaimable,omitempty"`
}

// Amount is card memory and card cores: MiB, and percent of a card's SMs (100 a card);
// and MIG slices, the compute slices of whole MIG instances (a 3g.40gb instance is 3),
// a dimension of their own, absent from JSON when zero.
type Amount struct {
	MemoryMiB float64 `json:"memoryMiB"`
	Cores     float64 `json:"cores"`
	MIGSlices float64 `json:"migSlices,omitempty"`
}

func amountOf(a fairshare.Amount) Amount {
	return Amount{MemoryMiB: a.MemoryMiB, Cores: a.Cores, MIGSlices: a.MIGSlices}
}

// HasMIG reports whether a queue holds or asks for MIG instances: only then do its
// views show MIG slices.
func (q *QueueView) HasMIG() bool { return q.Held.MIGSlices > 0 || q.Asked.MIGSlices > 0 }

// queueLoad is what a queue's vGPU pods hold and ask, in fairshare's terms.
type queueLoad struct {
	held, asked fairshare.Amount
	bound       int
}

// queueList is the part of a Queue list the CLI decodes.
type queueList struct {
	Items []struct {
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
	} `json:"items"`
}

// loadQueues reads Volcano's Queues through the client's REST path, without linking
// Volcano. A cluster without Volcano's CRDs (or a fake client) has none.
func loadQueues(ctx context.Context, client kubernetes.Interface, memory, cores corev1.ResourceName) ([]QueueSpec, error) {
	rc := client.Discovery().RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() {
		return nil, nil
	}
	raw, err := rc.Get().AbsPath("/apis/scheduling.volcano.sh/v1beta1/queues").DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list Volcano queues: %w", err)
	}
	return decodeQueues(raw, memory, cores)
}

func decodeQueues(raw []byte, memory, cores corev1.ResourceName) ([]QueueSpec, error) {
	var l queueList
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("decode Volcano queues: %w", err)
	}
	var out []QueueSpec
	for _, it := range l.Items {
		q := QueueSpec{Name: it.Metadata.Name, Weight: it.Spec.Weight, Capability: fairshare.Unlimited}
		if v, ok := it.Spec.Capability[string(memory)]; ok {
			q.Capability.MemoryMiB = float64(v.Value())
		}
		if v, ok := it.Spec.Capability[string(cores)]; ok {
			q.Capability.Cores = float64(v.Value())
		}
		if v, ok := it.Spec.Guarantee.Resource[string(memory)]; ok {
			q.Guarantee.MemoryMiB = float64(v.Value())
		}
		if v, ok := it.Spec.Guarantee.Resource[string(cores)]; ok {
			q.Guarantee.Cores = float64(v.Value())
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ShareCards is what the plugin's queue shares charge pods by (fairshare.Cards): the
// mean card's memory refMiB, for a percentage asked before the card is chosen, and
// each card's schedulable memory by UUID, for the cards an idle-only pod holds whole.
func ShareCards(refMiB int64, oversub float64, capacityMiB map[string]int64) fairshare.Cards {
	return fairshare.Cards{RefMiB: refMiB, WholeMiB: int64(float64(refMiB) * max(1, oversub)),
		CapacityMiB: func(uuid string) (int64, bool) {
			mib, ok := capacityMiB[uuid]
			return mib, ok
		}}
}

// MIGSupply is what the plugin's queue shares know of cards in MIG mode
// (book.Ledger.CardTotals, the vgpu plugin's cardCapacities): the compute slices that
// the healthy, uncordoned MIG cards of the nodes takes accepts add to the MIG supply
// (fairshare.CardMIGSlices), and each instance's compute slices by its device UUID,
// read off its profile, for fairshare.Cards.InstanceSlices.
func (s *Snapshot) MIGSupply(takes func(node *corev1.Node) bool) (float64, func(mig string) (float64, bool)) {
	total, slices := 0.0, map[string]float64{}
	for _, st := range s.nodeStates() {
		if st.engine == nil {
			continue
		}
		for _, c := range st.engine.Cards {
			if !c.MIG {
				continue
			}
			for _, in := range c.MIGInstances {
				if n, err := fairshare.MIGSlices(in.Profile); err == nil {
					slices[in.UUID] = n
				}
			}
			if c.Healthy && c.Cordon == nil && takes(st.node) {
				total += fairshare.CardMIGSlices(c.Card)
			}
		}
	}
	return total, func(mig string) (float64, bool) {
		n, ok := slices[mig]
		return n, ok
	}
}

// queueViews divides the schedulable cards among the snapshot's queues by the
// plugin's rules (healthy, non-MIG cards of nodes that are not cordoned; demand is
// what a queue's bound vGPU pods hold plus what its pending ones ask, an idle-only
// pod's cards whole), and the MIG slices of the MIG cards among them (MIGSupply).
func (s *Snapshot) queueViews() map[string]*QueueView {
	if len(s.Queues) == 0 {
		return nil
	}
	var total fairshare.Amount
	var physical, cards int64
	capacity := map[string]int64{}
	for _, st := range s.nodeStates() {
		if st.engine == nil {
			continue
		}
		for _, c := range st.engine.Cards {
			if !c.MIG {
				capacity[c.UUID] = c.CapacityMiB
			}
			if c.Healthy && !c.MIG && !st.node.Spec.Unschedulable {
				total.MemoryMiB += float64(c.CapacityMiB)
				total.Cores += 100
				physical += c.MemoryMiB
				cards++
			}
		}
	}
	refMiB := int64(0)
	if cards > 0 {
		refMiB = physical / cards
	}
	charge := ShareCards(refMiB, s.Args.MemoryOversubscription, capacity)
	total.MIGSlices, charge.InstanceSlices = s.MIGSupply(func(n *corev1.Node) bool { return !n.Spec.Unschedulable })
	views := map[string]*QueueView{}
	loads := map[string]*queueLoad{}
	var weight int32
	for _, q := range s.Queues {
		views[q.Name] = &QueueView{Queue: q.Name, Weight: q.Weight}
		loads[q.Name] = &queueLoad{}
		weight += q.Weight
	}
	for i := range s.Pods {
		p := &s.Pods[i]
		l := loads[Queue(p)]
		if l == nil || !s.Args.Resources.HasVGPURequest(p) {
			continue
		}
		if p.Spec.NodeName != "" {
			if cs, _, ok, err := s.podAssignment(p); ok && err == nil {
				l.held = l.held.Add(charge.Assigned(cs, api.HoldsIdleOnly(p.Annotations)))
				l.bound++
			}
			continue
		}
		if req, err := s.request(p); err == nil {
			l.asked = l.asked.Add(charge.Requested(req.Containers, req.Tenancy().IdleOnly))
		}
	}
	claims := make([]fairshare.Claim, len(s.Queues))
	for i, q := range s.Queues {
		l := loads[q.Name]
		claims[i] = fairshare.Claim{Weight: float64(q.Weight), Request: l.held.Add(l.asked), Capability: q.Capability,
			Guarantee: q.Guarantee}
	}
	deserved := map[string]fairshare.Amount{}
	for i, d := range fairshare.Divide(total, claims) {
		name := s.Queues[i].Name
		l, v := loads[name], views[name]
		deserved[name] = d
		v.Deserved, v.Held, v.Asked, v.TotalWeight = amountOf(d), amountOf(l.held), amountOf(l.asked), weight
		v.Below = fairshare.Below(l.held, d, l.asked)
	}
	for _, v := range views {
		if !v.Below {
			continue
		}
		// As reclaim does (shares.AboveShareFor): a queue is a victim only when it holds
		// more than it deserves in a dimension the queue below its share asks for.
		asked := loads[v.Queue].asked
		for name, o := range loads {
			if name != v.Queue && !o.held.Within(fairshare.OpenUnasked(deserved[name], asked)) && o.bound > 0 {
				if v.Reclaimable == nil {
					v.Reclaimable = map[string]int{}
				}
				v.Reclaimable[name] = o.bound
			}
		}
	}
	return views
}

// migSlices writes a number of MIG slices to the slice, as the scheduler's refusal does
// ("3.5" when weights split one).
func migSlices(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// writeQueue prints the queue lines of explain.
func writeQueue(w io.Writer, q *QueueView) {
	fmt.Fprintf(w, "  queue %s (weight %d of %d): holds %.0f of its %.0f deserved card cores and %.0f of %.0f MiB of card memory; its pending vGPU pods ask %.0f cores and %.0f MiB more\n",
		q.Queue, q.Weight, q.TotalWeight, q.Held.Cores, q.Deserved.Cores, q.Held.MemoryMiB, q.Deserved.MemoryMiB, q.Asked.Cores, q.Asked.MemoryMiB)
	if q.HasMIG() {
		fmt.Fprintf(w, "  queue %s holds %s of its %s deserved MIG slices; its pending MIG pods ask %s more\n",
			q.Queue, migSlices(q.Held.MIGSlices), migSlices(q.Deserved.MIGSlices), migSlices(q.Asked.MIGSlices))
	}
	if !q.Below {
		fmt.Fprintf(w, "  queue %s is at its share: its pods get cards as they free up, or cards no other queue can use; reclaim does not act for it\n", q.Queue)
		return
	}
	if len(q.Reclaimable) == 0 {
		fmt.Fprintf(w, "  queue %s is below its share, but no other queue holds more than its own: its pods wait for free cards\n", q.Queue)
		return
	}
	names := make([]string, 0, len(q.Reclaimable))
	for n := range q.Reclaimable {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  queue %s is below its share: reclaim may evict for it among the %d vGPU pods of queue %s, which holds more than its share (only members beyond each job's minAvailable)\n",
			q.Queue, q.Reclaimable[n], n)
	}
}
