package placement

import "github.com/tessera-gpu/tessera/api"

// The idle-only card policy (api.PolicyIdleOnly, HAMi's mutex), both ways: a pod that
// asks for it takes only cards nothing else is booked on, and a card it holds takes
// no other pod until it is gone. A booking is a booking wherever it comes from
// (running pods, assignments in flight, pipelined tasks): the node's usage counts them
// all, and the holders that asked for idle cards in Usage.IdleOnly.

// Tenancy is how a pod holds the cards of its assignment: its QoS class (the pool its
// shared tenants join) and whether it asked for idle cards only.
type Tenancy struct {
	QoS      api.QoSClass
	IdleOnly bool
}

// Tenancy is how the request's pod will hold its cards.
func (r *Request) Tenancy() Tenancy {
	return Tenancy{QoS: r.Options.QoS, IdleOnly: r.CardPolicy == api.PolicyIdleOnly}
}

// Reasons of the idle-only rule; both depend on other pods only, so evicting them
// could help (Resolvable).
const (
	// ReasonInUse: the pod asks for idle cards only and other pods are booked on the card.
	ReasonInUse Reason = "in use, the pod asks for idle cards only"
	// ReasonHeldIdleOnly: a pod that asked for idle cards only holds the card.
	ReasonHeldIdleOnly Reason = "held by an idle-only pod"
)

// checkIdle applies the rule to card c for a pod that asks for idle cards only
// (idleOnly) or not. It reads the card's own bookings, not what earlier containers of
// the same pod took: a pod's containers may share its cards.
func checkIdle(c *CardState, idleOnly bool, r *CardReject) bool {
	switch {
	case c.Used.IdleOnly > 0:
		*r = CardReject{Index: c.Index, UUID: c.UUID, Reason: ReasonHeldIdleOnly, why: rejectDetail{kind: detailHeldIdleOnly}}
		return true
	case idleOnly && c.Used.Tenants > 0:
		*r = CardReject{Index: c.Index, UUID: c.UUID, Reason: ReasonInUse, why: rejectDetail{kind: detailInUse, a: int64(c.Used.Tenants)}}
		return true
	}
	return false
}

// idleText is how a card refused by the rule is named in the node's reason, e.g.
// "card 3 is in use by 2 containers; the pod asks for idle cards only (…)".
func idleText(r CardReject) string {
	if r.why.kind == detailInUse {
		return "card " + itoa(int64(r.Index)) + " is " + inUseText(r.why.a)
	}
	return "card " + itoa(int64(r.Index)) + " is held by an idle-only pod"
}

// inUseText says how many containers of other pods use a card the pod wants idle.
func inUseText(containers int64) string {
	noun := " containers"
	if containers == 1 {
		noun = " container"
	}
	return "in use by " + itoa(containers) + noun + "; the pod asks for idle cards only (" + api.AnnotationCardPolicy + ": " +
		string(api.PolicyIdleOnly) + ")"
}

// idleRefusal is the first card the rule refused, to be named in the node's reason
// when the rule is what keeps the container off the node (without it, enough cards
// would be left), and how many more it refused.
func (e *FitError) idleRefusal() (first CardReject, more int, ok bool) {
	n := 0
	for _, r := range e.Rejects {
		if r.Reason != ReasonInUse && r.Reason != ReasonHeldIdleOnly {
			continue
		}
		if n == 0 {
			first = r
		}
		n++
	}
	return first, n - 1, n > 0 && e.Fitting+n >= e.Wanted
}
