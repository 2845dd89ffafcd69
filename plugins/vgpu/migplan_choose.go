package vgpu

import (
	"slices"

	"github.com/tessera-gpu/tessera/placement/mig"
)

// The choice of MIG re-partitions, apart from the session: which idle cards of which
// opted-in nodes get a new layout for the MIG instances pending pods ask for and no
// card has free. Greedy, not optimal: nodes in name order, a node's cards in index
// order, one plan per node per session, each card given the demand still unmet in
// the order the pods wait (mig.Repartition).

// migDemand is one MIG instance a pending pod asks for.
type migDemand struct {
	Profile string
	// Job is the pod's job key (for the PodGroup event), Pod its namespace/name.
	Job string
	Pod string
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

// unmetMIGDemand returns the indices of the demand, in order, that the free
// instances of every card cannot hold: each demand takes a free instance of its
// profile while any is left.
func unmetMIGDemand(nodes []migNodeView, demand []migDemand) []int32 {
	free := map[string]int{}
	for _, n := range nodes {
		for _, c := range n.Cards {
			for p, k := range c.Free {
				free[p] += k
			}
		}
	}
	var unmet []int32
	for i, d := range demand {
		if free[d.Profile] > 0 {
			free[d.Profile]--
			continue
		}
		unmet = append(unmet, int32(i))
	}
	return unmet
}

// migShortlistPerProfile bounds how many waiting instances of one profile a card is
// offered: a card holds at most 8 instances of any profile.
const migShortlistPerProfile = 8

// chooseMIGPlans picks, for the unmet demand, at most one card per opted-in node
// that is not busy and a layout for it (nodes must be in name order).
func chooseMIGPlans(nodes []migNodeView, demand []migDemand) []migPlanned {
	// The unmet demand by profile, each in the order the pods wait.
	queues := map[string][]int32{}
	left := 0
	for _, i := range unmetMIGDemand(nodes, demand) {
		queues[demand[i].Profile] = append(queues[demand[i].Profile], i)
		left++
	}
	var out []migPlanned
	for _, n := range nodes {
		if left == 0 {
			break
		}
		if !n.OptedIn || n.Busy {
			continue
		}
		// The first few waiting instances of each profile, in the order they wait: the
		// rest could not be served by one card anyway, and a long queue stays cheap.
		var shortIdx []int32
		for _, q := range queues {
			shortIdx = append(shortIdx, q[:min(len(q), migShortlistPerProfile)]...)
		}
		slices.Sort(shortIdx)
		short := make([]string, len(shortIdx))
		for k, i := range shortIdx {
			short[k] = demand[i].Profile
		}
		for _, c := range n.Cards {
			if !c.Plannable {
				continue
			}
			table, ok := mig.KnownTable(c.Model)
			if !ok {
				continue
			}
			choice, ok := mig.Repartition(table, c.Current, short)
			if !ok {
				continue
			}
			served := make([]migDemand, 0, len(choice.Served))
			for _, k := range choice.Served {
				i := shortIdx[k]
				d := demand[i]
				served = append(served, d)
				q := queues[d.Profile]
				if j := slices.Index(q, i); j >= 0 {
					queues[d.Profile] = slices.Delete(q, j, j+1)
				}
				left--
			}
			out = append(out, migPlanned{Node: n.Name, Card: c, Choice: choice, Served: served})
			break
		}
	}
	return out
}
