package book

import (
	"fmt"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// The cards of DRA nodes and the claims on them. A DRA node stays unusable to vGPU
// tasks (MarkUnusable says why); AddDRANode adds its cards to the supply and to the
// cards the metrics show, AccountClaim books what an allocated claim consumes.

// AddDRANode registers the cards of a node whose agent serves them as DRA devices;
// only while the ledger is being built. Build n with no memory oversubscription: a
// claim consumes physical MiB.
func (l *Ledger) AddDRANode(n *placement.Node, cordoned bool) {
	l.dra.add(n, cordoned)
}

// DRACards returns the inventory cards of a DRA node, and whether the ledger holds it.
func (l *Ledger) DRACards(node string) ([]api.Card, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n, ok := l.dra.nodes[node]
	if !ok {
		return nil, false
	}
	cards := make([]api.Card, len(n.Cards))
	for i := range n.Cards {
		cards[i] = n.Cards[i].Card
	}
	return cards, true
}

// LargestDRACardMiB is the memory of the largest card of the DRA nodes that take
// claims (0 without any): what a claim request that names no memory is costed at.
func (l *Ledger) LargestDRACardMiB() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var largest int64
	l.dra.supply(func(c *placement.CardState) { largest = max(largest, c.MemoryMiB) })
	return largest
}

// DRASupply is the memory and cores of the DRA nodes' cards that take claims: the
// part of CardTotals only DRA tasks reach.
func (l *Ledger) DRASupply() fairshare.Amount {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var a fairshare.Amount
	l.dra.supply(func(c *placement.CardState) {
		a.MemoryMiB += float64(c.CapacityMiB)
		a.Cores += 100
	})
	return a
}

// AccountClaim books what an allocated claim consumes of a DRA node's cards; only
// while the ledger is being built. The errors name the cards the claims together
// take beyond their memory or cores (the node agent refuses such a claim; the book
// counts it, since the claim is allocated).
func (l *Ledger) AccountClaim(node, claim string, cards []api.CardAssignment) []error {
	n, ok := l.dra.nodes[node]
	if !ok {
		return []error{fmt.Errorf("node %s is not a DRA node of the card book", node)}
	}
	var errs []error
	for _, c := range cards {
		i := cardAt(n, c.UUID)
		if i < 0 {
			errs = append(errs, fmt.Errorf("claim %s: card %s is not on node %s", claim, c.UUID, node))
			continue
		}
		l.dra.book(node, claim, []api.CardAssignment{c})
		card := &n.Cards[i]
		card.Used.MemoryMiB += c.MemoryMiB
		card.Used.Cores += c.Cores
		card.Used.Tenants++
		if card.FreeMiB() < 0 || card.FreeCores() < 0 {
			errs = append(errs, fmt.Errorf("claim %s: card %d (%s) on %s is over-committed by its claims: %d/%d MiB, %d%% cores",
				claim, card.Index, card.UUID, node, card.Used.MemoryMiB, card.CapacityMiB, card.Used.Cores))
		}
	}
	return errs
}

// DRANode is a copy of a DRA node's cards with what the session's allocated claims
// consume of them; nil when the ledger holds no such node.
func (l *Ledger) DRANode(node string) *placement.Node {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n, ok := l.dra.nodes[node]
	if !ok {
		return nil
	}
	return n.Clone()
}

// DRATakesClaims reports whether new claims may land on the DRA node's card: healthy,
// not MIG, neither it nor its node cordoned (the cards of the supply).
func (l *Ledger) DRATakesClaims(node string, c *placement.CardState) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dra.takesClaims(node, c)
}

// ClaimCards is what an allocated claim (namespace/name) was booked on node: a copy of
// its share of each card; false when the claim holds nothing there.
func (l *Ledger) ClaimCards(node, claim string) ([]api.CardAssignment, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	cards, ok := l.dra.claims[claim][node]
	if !ok {
		return nil, false
	}
	return append([]api.CardAssignment(nil), cards...), true
}

// NoteClaimSkipped counts a claim result left out of the count, by reason; only while
// the ledger is being built.
func (l *Ledger) NoteClaimSkipped(reason string) {
	if l.dra.skipped == nil {
		l.dra.skipped = map[string]int{}
	}
	l.dra.skipped[reason]++
}

// ClaimsSkipped is how many claim results the session left out, by reason.
func (l *Ledger) ClaimsSkipped() map[string]int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]int, len(l.dra.skipped))
	for k, v := range l.dra.skipped {
		out[k] = v
	}
	return out
}

func cardAt(n *placement.Node, uuid string) int {
	for i := range n.Cards {
		if n.Cards[i].UUID == uuid {
			return i
		}
	}
	return -1
}
