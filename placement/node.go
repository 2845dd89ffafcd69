// Package placement decides which cards of a node a pod's vGPU containers get. It is
// pure: it imports only the contract (package api) and the standard library, has no
// clocks and no globals, so that the scheduler plugin, the node agent's preferred
// allocation, the CLI's explain command and the tests all run the same maths.
package placement

import (
	"fmt"
	"maps"

	"github.com/tessera-gpu/tessera/api"
)

// Usage is what is taken on one card.
type Usage struct {
	MemoryMiB int64
	Cores     int
	// Tenants counts the containers using the card.
	Tenants int
	// Classes counts the shared tenants per QoS class: a card's pool is the class
	// its shared tenants belong to. Exclusive tenants are outside the pools.
	Classes ClassCounts
	// IdleOnly counts the tenants whose pod asked for idle cards only (Tenancy):
	// while any holds the card, no other pod is placed on it.
	IdleOnly int32
}

// CardState is a card with its capacity and current usage.
type CardState struct {
	api.Card
	// CapacityMiB is the schedulable memory: the card's memory times the
	// configured oversubscription factor.
	CapacityMiB int64
	Used        Usage
}

// FreeMiB is the memory still available on the card.
func (c *CardState) FreeMiB() int64 { return c.CapacityMiB - c.Used.MemoryMiB }

// FreeCores is the compute share still available on the card.
func (c *CardState) FreeCores() int { return 100 - c.Used.Cores }

// Node is one node's cards. It is not safe for concurrent mutation; the plugin
// guards it.
type Node struct {
	Name  string
	Cards []CardState
	byID  map[string]int
	// topo holds the pairwise link scores; nil when the inventory has no link
	// matrix, in which case cards are chosen as if links did not matter.
	topo *topology
	// mig counts the bookings that name each MIG device (migfit.go); nil while none
	// does, so nodes without MIG pay nothing for it.
	mig map[string]int32
}

// NewNode builds a node from an inventory. oversub scales schedulable memory (≥ 1).
func NewNode(name string, inv *api.NodeInventory, oversub float64) *Node {
	if oversub < 1 {
		oversub = 1
	}
	n := &Node{Name: name, Cards: make([]CardState, len(inv.Cards)), byID: make(map[string]int, len(inv.Cards))}
	for i, c := range inv.Cards {
		n.Cards[i] = CardState{Card: c, CapacityMiB: int64(float64(c.MemoryMiB) * oversub)}
		n.byID[c.UUID] = i
	}
	n.topo = newTopology(inv)
	return n
}

// Clone returns an independent copy.
func (n *Node) Clone() *Node {
	c := &Node{Name: n.Name, Cards: append([]CardState(nil), n.Cards...), byID: n.byID, topo: n.topo}
	if n.mig != nil {
		c.mig = maps.Clone(n.mig)
	}
	return c
}

// Card returns the card with the given UUID, or nil.
func (n *Node) Card(uuid string) *CardState {
	if i, ok := n.byID[uuid]; ok {
		return &n.Cards[i]
	}
	return nil
}

// Reserve books an assignment held as t. It checks every card first and changes
// nothing unless all of them have room, so a card is never over-committed.
func (n *Node) Reserve(cs []api.ContainerAssignment, t Tenancy) error {
	need := make(map[int]Usage)
	var migs []string
	for _, c := range cs {
		for _, a := range c.Cards {
			i, ok := n.byID[a.UUID]
			if !ok {
				return fmt.Errorf("node %s has no card %s", n.Name, a.UUID)
			}
			if a.IsMIG() {
				// A whole MIG instance: booked by its UUID, not on the card's usage.
				if err := n.checkMIGBooking(&n.Cards[i], a, migs); err != nil {
					return err
				}
				migs = append(migs, a.MIG)
				continue
			}
			u := need[i]
			u.add(tenantUsage(a, t))
			need[i] = u
		}
	}
	for i, u := range need {
		c := &n.Cards[i]
		switch {
		case u.MemoryMiB > c.FreeMiB():
			return fmt.Errorf("card %d (%s) on %s: %d MiB wanted, %d MiB free", c.Index, c.UUID, n.Name, u.MemoryMiB, c.FreeMiB())
		case u.Cores > c.FreeCores():
			return fmt.Errorf("card %d (%s) on %s: %d%% cores wanted, %d%% free", c.Index, c.UUID, n.Name, u.Cores, c.FreeCores())
		case c.Used.Tenants+u.Tenants > c.Shares:
			return fmt.Errorf("card %d (%s) on %s: %d tenants already, shares %d", c.Index, c.UUID, n.Name, c.Used.Tenants, c.Shares)
		}
	}
	for i, u := range need {
		n.Cards[i].Used.add(u)
	}
	for _, c := range cs {
		for _, a := range c.Cards {
			if a.IsMIG() {
				_ = n.holdMIG(n.Card(a.UUID), a) // checked free above
			}
		}
	}
	return nil
}

// Account books an assignment that already exists on the node (a running pod)
// even if it over-commits a card: ignoring it would hand the same memory out twice.
// It returns the problems it found so the caller can log them.
func (n *Node) Account(cs []api.ContainerAssignment, t Tenancy) []error {
	return n.eachCard(cs, func(card *CardState, a api.CardAssignment) error {
		if a.IsMIG() {
			return n.holdMIG(card, a)
		}
		card.Used.add(tenantUsage(a, t))
		if card.FreeMiB() < 0 || card.FreeCores() < 0 || card.Used.Tenants > card.Shares {
			return fmt.Errorf("card %d (%s) on %s is over-committed: %d/%d MiB, %d%% cores, %d/%d tenants",
				card.Index, card.UUID, n.Name, card.Used.MemoryMiB, card.CapacityMiB, card.Used.Cores, card.Used.Tenants, card.Shares)
		}
		return nil
	})
}

// Release returns an assignment's cards, booked as t. Usage never goes below zero;
// a release that would is reported.
func (n *Node) Release(cs []api.ContainerAssignment, t Tenancy) []error {
	return n.eachCard(cs, func(card *CardState, a api.CardAssignment) error {
		if a.IsMIG() {
			return n.releaseMIG(card, a)
		}
		if err := card.Used.sub(tenantUsage(a, t)); err != nil {
			return fmt.Errorf("card %d (%s) on %s: %w", card.Index, card.UUID, n.Name, err)
		}
		return nil
	})
}

// eachCard applies f to every card of an assignment, collecting the problems,
// including cards the node does not have.
func (n *Node) eachCard(cs []api.ContainerAssignment, f func(*CardState, api.CardAssignment) error) []error {
	var errs []error
	for _, c := range cs {
		for _, a := range c.Cards {
			card := n.Card(a.UUID)
			if card == nil {
				errs = append(errs, fmt.Errorf("node %s has no card %s", n.Name, a.UUID))
				continue
			}
			if err := f(card, a); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

func (u *Usage) add(d Usage) {
	u.MemoryMiB += d.MemoryMiB
	u.Cores += d.Cores
	u.Tenants += d.Tenants
	u.Classes.add(d.Classes)
	u.IdleOnly += d.IdleOnly
}

func (u *Usage) sub(d Usage) error {
	var err error
	if d.MemoryMiB > u.MemoryMiB || d.Cores > u.Cores || d.Tenants > u.Tenants || !u.Classes.covers(d.Classes) ||
		d.IdleOnly > u.IdleOnly {
		err = fmt.Errorf("release of %+v exceeds usage %+v; clamped at zero", d, *u)
	}
	u.MemoryMiB = max(0, u.MemoryMiB-d.MemoryMiB)
	u.Cores = max(0, u.Cores-d.Cores)
	u.Tenants = max(0, u.Tenants-d.Tenants)
	u.Classes.sub(d.Classes)
	u.IdleOnly = max(0, u.IdleOnly-d.IdleOnly)
	if u.IdleOnly > int32(u.Tenants) {
		// Released as shared what was booked idle-only: a card without tenants must
		// never stay held.
		err = fmt.Errorf("release of %+v leaves %d idle-only holders on %d tenants; clamped", d, u.IdleOnly, u.Tenants)
		u.IdleOnly = int32(u.Tenants)
	}
	return err
}
