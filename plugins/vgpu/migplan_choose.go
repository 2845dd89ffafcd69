package vgpu

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/mig"
)

// The choice of MIG re-partitions, apart from the session: which idle cards of which
// opted-in nodes get a new layout for the MIG instances pending pods ask for and no
// card they may use has free. Greedy, not optimal: nodes in name order, a node's
// cards in index order, one plan per node per session, each card given the demand
// still unmet that may use it, in the order the pods wait (mig.Repartition). A pod's
// demand is served only from a card it could be placed on: a node its node selector,
// required node affinity and tolerations allow, a card its card filters allow.

// migDemand is one MIG instance a pending pod asks for.
type migDemand struct {
	Profile string
	// Job is the pod's job key (for the PodGroup event), Pod its namespace/name.
	Job string
	Pod string
	// Where limits the nodes and cards the pod may use; nil is a pod without node
	// selector, node affinity, tolerations or card filters. Pods whose limits are
	// alike share one value, so that each node is judged once for all of them.
	Where *migPodLimits
}

// migPodLimits is what limits where a pod asking for MIG instances may go.
type migPodLimits struct {
	// Affinity is the pod's node selector and required node affinity together.
	Affinity nodeaffinity.RequiredNodeAffinity
	// Tolerations are weighed against the node's NoSchedule and NoExecute taints.
	Tolerations []corev1.Toleration
	// Filters holds the pod's card filters (UUID and GPU type include and exclude),
	// applied to the parent card as placement applies them.
	Filters api.PodOptions
}

// allowsNode reports whether the pod may go to the node: the node matches its node
// selector and required node affinity, and it tolerates every NoSchedule and
// NoExecute taint of the node. An affinity that cannot be read matches no node.
func (l *migPodLimits) allowsNode(n *corev1.Node) bool {
	var tolerations []corev1.Toleration
	if l != nil {
		if ok, err := l.Affinity.Match(n); err != nil || !ok {
			return false
		}
		tolerations = l.Tolerations
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(n.Spec.Taints, tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	})
	return !untolerated
}

// allowsCard reports whether the pod's card filters let it use the card.
func (l *migPodLimits) allowsCard(c *migCardView) bool {
	return l == nil || placement.CardFiltersAllow(c.UUID, c.Model, &l.Filters)
}

// migCardView is one card in MIG mode as the chooser sees it.
type migCardView struct {
	UUID  string
	Index int
	Model string
	// Current is the card's GPU instances.
	Current mig.Geometry
	// Free counts the free instances of each profile that pods may be placed on now;
	// empty for a card that takes no pod (unhealthy, cordoned, being re-partitioned).
	Free map[string]int
	// Plannable is set for a card that may be re-partitioned now: healthy, not
	// cordoned, its layout known, no instance held or in flight, no plan outstanding
	// and no recent refusal.
	Plannable bool
}

// migNodeView is one node with cards in MIG mode.
type migNodeView struct {
	Name string
	// Node carries the labels and taints pods are matched against; nil is a node
	// without labels or taints.
	Node *corev1.Node
	// OptedIn: the node's agent re-partitions cards (api.AnnotationMIGRepartition).
	OptedIn bool
	// Busy: a plan is outstanding on the node, or the node takes no new pods.
	Busy  bool
	Cards []migCardView
}

// migPlanned is a plan chosen for one card.
type migPlanned struct {
	Node   string
	Card   migCardView
	Choice mig.Choice
	Served []migDemand
}

// migReach answers, for the pods' distinct limits ("classes", numbered in the order
// they first wait), which nodes they may go to; each node is judged once per class.
type migReach struct {
	nodes   []migNodeView
	classOf []int // demand index -> class
	limits  []*migPodLimits
	// onNode[class][node]: 0 not judged yet, 1 allowed, 2 not.
	onNode [][]int8
}

func newMIGReach(nodes []migNodeView, demand []migDemand) *migReach {
	r := &migReach{nodes: nodes, classOf: make([]int, len(demand))}
	ids := map[*migPodLimits]int{}
	for i, d := range demand {
		id, ok := ids[d.Where]
		if !ok {
			id = len(r.limits)
			ids[d.Where] = id
			r.limits = append(r.limits, d.Where)
			r.onNode = append(r.onNode, nil)
		}
		r.classOf[i] = id
	}
	return r
}

// node reports whether pods of the class may go to node n (an index into nodes).
func (r *migReach) node(class, n int) bool {
	row := r.onNode[class]
	if row == nil {
		row = make([]int8, len(r.nodes))
		r.onNode[class] = row
	}
	if row[n] == 0 {
		node := r.nodes[n].Node
		if node == nil {
			node = &corev1.Node{}
			node.Name = r.nodes[n].Name
		}
		row[n] = 2
		if r.limits[class].allowsNode(node) {
			row[n] = 1
		}
	}
	return row[n] == 1
}

// card reports whether pods of the class may use card c of node n.
func (r *migReach) card(class, n int, c *migCardView) bool {
	return r.node(class, n) && r.limits[class].allowsCard(c)
}

// unmetMIGDemand returns the indices of the demand, in order, that no free instance
// the pod may use can hold: each demand takes a free instance of its profile, on the
// first card (in node then card order) it may use that has one left.
func unmetMIGDemand(nodes []migNodeView, demand []migDemand, r *migReach) []int32 {
	wanted := map[string]bool{}
	for _, d := range demand {
		wanted[d.Profile] = true
	}
	// The cards with free instances of each profile wanted, and how many are left.
	type stock struct {
		node, card, left int
	}
	withFree := map[string][]stock{}
	for i, n := range nodes {
		for j, c := range n.Cards {
			for p, k := range c.Free {
				if k > 0 && wanted[p] {
					withFree[p] = append(withFree[p], stock{i, j, k})
				}
			}
		}
	}
	// A class's cursor into withFree[profile] only moves on: a card it passes is one
	// the class may not use or one with none of the profile left, and stays so.
	type key struct {
		class   int
		profile string
	}
	cursor := map[key]int{}
	var unmet []int32
	for i, d := range demand {
		stocks := withFree[d.Profile]
		k := key{r.classOf[i], d.Profile}
		at := cursor[k]
		for ; at < len(stocks); at++ {
			s := &stocks[at]
			if s.left > 0 && r.card(k.class, s.node, &nodes[s.node].Cards[s.card]) {
				break
			}
		}
		cursor[k] = at
		if at == len(stocks) {
			unmet = append(unmet, int32(i))
			continue
		}
		stocks[at].left--
	}
	return unmet
}

// migShortlistPerProfile bounds how many waiting instances of one profile a card is
// offered: a card holds at most 8 instances of any profile.
const migShortlistPerProfile = 8

// chooseMIGPlans picks, for the unmet demand, at most one card per opted-in node
// that is not busy and a layout for it (nodes must be in name order). A card is
// offered only the demand of pods that may use it.
func chooseMIGPlans(nodes []migNodeView, demand []migDemand) []migPlanned {
	r := newMIGReach(nodes, demand)
	// The unmet demand by class and profile, each in the order the pods wait.
	type key struct {
		class   int
		profile string
	}
	queues := map[key][]int32{}
	var keys []key // in the order first seen, for a stable walk
	left := 0
	for _, i := range unmetMIGDemand(nodes, demand, r) {
		k := key{r.classOf[i], demand[i].Profile}
		if _, ok := queues[k]; !ok {
			keys = append(keys, k)
		}
		queues[k] = append(queues[k], i)
		left++
	}
	var out []migPlanned
	var shortIdx []int32
	for ni := range nodes {
		n := &nodes[ni]
		if left == 0 {
			break
		}
		if !n.OptedIn || n.Busy {
			continue
		}
		for ci := range n.Cards {
			c := &n.Cards[ci]
			if !c.Plannable {
				continue
			}
			table, ok := mig.KnownTable(c.Model)
			if !ok {
				continue
			}
			// The first few waiting instances of each profile that may use the card, in
			// the order they wait: the rest could not be served by one card anyway, and a
			// long queue stays cheap.
			shortIdx = shortIdx[:0]
			for _, k := range keys {
				q := queues[k]
				if len(q) == 0 || !r.card(k.class, ni, c) {
					continue
				}
				shortIdx = append(shortIdx, q[:min(len(q), migShortlistPerProfile)]...)
			}
			if len(shortIdx) == 0 {
				continue
			}
			slices.Sort(shortIdx)
			shortIdx = capPerProfile(shortIdx, demand)
			short := make([]string, len(shortIdx))
			for k, i := range shortIdx {
				short[k] = demand[i].Profile
			}
			choice, ok := mig.Repartition(table, c.Current, short)
			if !ok {
				continue
			}
			served := make([]migDemand, 0, len(choice.Served))
			for _, s := range choice.Served {
				i := shortIdx[s]
				d := demand[i]
				served = append(served, d)
				k := key{r.classOf[i], d.Profile}
				q := queues[k]
				if j := slices.Index(q, i); j >= 0 {
					queues[k] = slices.Delete(q, j, j+1)
				}
				left--
			}
			out = append(out, migPlanned{Node: n.Name, Card: *c, Choice: choice, Served: served})
			break
		}
	}
	return out
}

// capPerProfile keeps, of demand indices in order, the first migShortlistPerProfile
// of each profile (several classes may offer the same profile).
func capPerProfile(idx []int32, demand []migDemand) []int32 {
	seen := map[string]int{}
	out := idx[:0]
	for _, i := range idx {
		p := demand[i].Profile
		if seen[p] < migShortlistPerProfile {
			seen[p]++
			out = append(out, i)
		}
	}
	return out
}
