package scale

import (
	"fmt"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Percentile returns the q-quantile (0..1) of sorted values by the nearest-rank rule;
// 0 for no values.
func Percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// LowerBound is the fewest cards that can hold the given card cores (100 per card) and
// memory: no packing does better, whatever the gangs, filters and NUMA nodes.
func LowerBound(cores, mib float64) int {
	return int(math.Max(math.Ceil(cores/100-1e-9), math.Ceil(mib/CardMiB-1e-9)))
}

// CardLoad is what the bound pods hold of one card.
type CardLoad struct {
	MemoryMiB int64
	Cores     int
	Holders   int
	Exclusive bool
}

// Cards sums the cards' assignments over the pods that are bound and not finished, as
// either scheduler wrote them (Tessera's tessera.io/assignment, Volcano's
// volcano.sh/vgpu-ids-new). Pods holding a card without an assignment are counted in
// missing. queueOf names a pod's queue.
func Cards(pods []*corev1.Pod, d *api.Decoders, queueOf func(*corev1.Pod) string) (load map[string]*CardLoad, perQueue map[string]fairshare.Amount, missing int, err error) {
	load, perQueue = map[string]*CardLoad{}, map[string]fairshare.Amount{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		cs, _, ok, err := d.PodCards(p, api.DefaultResourceNames())
		if err != nil {
			return nil, nil, 0, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		if !ok {
			if asksDevicePlugin(p) {
				missing++
			}
			continue
		}
		q := queueOf(p)
		// As the scheduler charges queues: an idle-only pod pays for its cards whole (every
		// card of the scale cluster has CardMiB).
		perQueue[q] = perQueue[q].Add(fairshare.Cards{WholeMiB: CardMiB}.Assigned(cs, api.HoldsIdleOnly(p.Annotations)))
		for _, c := range cs {
			for _, card := range c.Cards {
				l := load[card.UUID]
				if l == nil {
					l = &CardLoad{}
					load[card.UUID] = l
				}
				l.MemoryMiB += card.MemoryMiB
				l.Cores += card.Cores
				l.Holders++
				l.Exclusive = l.Exclusive || card.Cores >= 100
			}
		}
	}
	return load, perQueue, missing, nil
}

// wantsCards says whether the pod asks for cards, through the device plugin's resources
// or through a claim (the run's only claims are the driver's).
func wantsCards(p *corev1.Pod) bool { return asksDevicePlugin(p) || len(p.Spec.ResourceClaims) > 0 }

func asksDevicePlugin(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if _, ok := c.Resources.Limits[api.ResourceNumber]; ok {
			return true
		}
	}
	return false
}

// Overcommitted lists the cards holding more than their memory or 100% of their cores,
// or shared while one holder has the card to itself.
func Overcommitted(load map[string]*CardLoad) []string {
	var bad []string
	for uuid, l := range load {
		if l.MemoryMiB > CardMiB || l.Cores > 100 || (l.Exclusive && l.Holders > 1) {
			bad = append(bad, fmt.Sprintf("%s: %d MiB, %d%% cores, %d holders", uuid, l.MemoryMiB, l.Cores, l.Holders))
		}
	}
	sort.Strings(bad)
	return bad
}

// QueueShare is one queue's card cores at the end against its weighted max-min share.
type QueueShare struct {
	Queue  string
	Weight int32
	// Demand is what the queue's pods ask for, Held what its bound pods hold, Fair its
	// weighted max-min share of the cluster's cards given every queue's demand (card
	// cores, 100 per card).
	Demand, Held, Fair float64
}

// Shares compares each queue's held card cores with its weighted max-min share of
// the cluster's cards (total) given the queues' demands.
func Shares(total fairshare.Amount, demand, held map[string]fairshare.Amount) []QueueShare {
	claims := make([]fairshare.Claim, len(Queues))
	for i, q := range Queues {
		claims[i] = fairshare.Claim{Weight: float64(q.Weight), Request: demand[q.Name], Capability: fairshare.Unlimited}
	}
	fair := fairshare.Divide(total, claims)
	out := make([]QueueShare, len(Queues))
	for i, q := range Queues {
		out[i] = QueueShare{Queue: q.Name, Weight: q.Weight, Demand: demand[q.Name].Cores, Held: held[q.Name].Cores, Fair: fair[i].Cores}
	}
	return out
}

// QueueGap is how far the queues' shares are from weighted max-min: the largest
// difference between a queue's held and fair card cores, in percentage points of the
// cluster's card cores (total); and how many times the cards the queues asked for
// (above 1 the queues contend, and the weights decide).
func QueueGap(qs []QueueShare, total float64) (gapPoints, contention float64) {
	if total <= 0 {
		return 0, 0
	}
	var demand float64
	for _, q := range qs {
		gapPoints = max(gapPoints, math.Abs(q.Held-q.Fair)/total*100)
		demand += q.Demand
	}
	return gapPoints, demand / total
}

// Demand sums the card cores and memory the jobs' pods ask for, per queue.
func Demand(jobs []JobSpec) map[string]fairshare.Amount {
	out := map[string]fairshare.Amount{}
	for _, j := range jobs {
		c, m := j.CardShare()
		out[j.Queue] = out[j.Queue].Add(fairshare.Amount{MemoryMiB: m * float64(j.Replicas), Cores: c * float64(j.Replicas)})
	}
	return out
}
