package book

import (
	"sort"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// draCards are the cards of the nodes whose agent serves them as DRA devices
// (ResourceClaims of driver vgpu.tessera.io): the Kubernetes allocator places claims
// there, never this plugin, so they answer no predicate. Their usage is what the
// claims allocated on them consume; their capacity is part of the supply the queue
// shares divide. Written only while the ledger is built.
type draCards struct {
	nodes    map[string]*placement.Node
	cordoned map[string]bool
	// skipped counts the claim results left out of the count, by reason.
	skipped map[string]int
	// claims is, per claim (namespace/name) and node, the cards the claim was booked
	// on: what evicting its pod would free.
	claims map[string]map[string][]api.CardAssignment
}

func (d *draCards) add(n *placement.Node, cordoned bool) {
	if d.nodes == nil {
		d.nodes, d.cordoned = map[string]*placement.Node{}, map[string]bool{}
	}
	d.nodes[n.Name] = n
	if cordoned {
		d.cordoned[n.Name] = true
	}
}

// each calls fn for every card of every DRA node, in node name order.
func (d *draCards) each(fn func(node string, c *placement.CardState)) {
	names := make([]string, 0, len(d.nodes))
	for name := range d.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := d.nodes[name]
		for i := range n.Cards {
			fn(name, &n.Cards[i])
		}
	}
}

// supply calls fn for every card that takes new claims: healthy, not MIG, neither it
// nor its node cordoned.
func (d *draCards) supply(fn func(c *placement.CardState)) {
	d.each(func(node string, c *placement.CardState) {
		if d.takesClaims(node, c) {
			fn(c)
		}
	})
}

// takesClaims reports whether new claims may land on the node's card c.
func (d *draCards) takesClaims(node string, c *placement.CardState) bool {
	return !d.cordoned[node] && c.Healthy && !c.MIG && c.Cordon == nil
}

// book remembers the cards a claim was booked on.
func (d *draCards) book(node, claim string, cards []api.CardAssignment) {
	if d.claims == nil {
		d.claims = map[string]map[string][]api.CardAssignment{}
	}
	if d.claims[claim] == nil {
		d.claims[claim] = map[string][]api.CardAssignment{}
	}
	d.claims[claim][node] = append(d.claims[claim][node], cards...)
}
