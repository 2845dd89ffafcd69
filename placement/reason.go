package placement

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/api"
)

// Reason is why a card cannot take a container.
type Reason string

// Reasons, in the order the filters apply them.
const (
	ReasonUnhealthy  Reason = "unhealthy"
	ReasonMIG        Reason = "in MIG mode"
	ReasonUUIDFilter Reason = "excluded by UUID annotation"
	ReasonTypeFilter Reason = "excluded by GPU type annotation"
	ReasonTooSmall   Reason = "smaller than the request"
	ReasonShares     Reason = "all shares taken"
	ReasonNotIdle    Reason = "not idle for an exclusive request"
	ReasonCores      Reason = "insufficient cores"
	ReasonMemory     Reason = "insufficient memory"
	ReasonQoS        Reason = "in another QoS pool"
)

// ReasonContextReserve: the container's memory on the card is less than one CUDA
// context takes there (the card's api.Card.ContextReserveMiB), so the container could
// not create even one. It applies just before ReasonTooSmall.
const ReasonContextReserve Reason = "below the CUDA context reserve"

// ReasonCordoned: an administrator has cordoned the card (api.AnnotationCordonedCards);
// it takes no new task, and its tenants keep running. It applies just after
// ReasonUnhealthy, and no eviction clears it.
const ReasonCordoned Reason = "cordoned"

// Resolvable reports whether the reason depends on other tenants' usage, so that
// evicting or waiting for them could help. The rest are properties of the card or
// of the request.
func (r Reason) Resolvable() bool {
	switch r {
	case ReasonShares, ReasonNotIdle, ReasonCores, ReasonMemory, ReasonQoS, ReasonInUse, ReasonHeldIdleOnly, ReasonMIGTaken:
		return true
	}
	return false
}

// CardReject is one card's refusal.
type CardReject struct {
	Index  int
	UUID   string
	Reason Reason
	// Detail names the limit that failed, e.g. "30% wanted, 20% free". The engine
	// leaves it empty and keeps the figures instead (a scheduling session refuses
	// cards by the million and shows almost none of them): Explain writes it, and
	// FitError.Explained fills it for every refused card.
	Detail string
	why    rejectDetail
}

// rejectDetail holds what a refusal's text is written from.
type rejectDetail struct {
	kind    detailKind
	text    string // the card's model, or the QoS class it hosts
	text2   string // the pod's QoS class
	a, b, c int64
}

type detailKind uint8

const (
	detailNone         detailKind = iota
	detailNotInUUIDs              // not in the include list
	detailInUUIDs                 // in the exclude list
	detailTypeMissing             // text: model
	detailTypeExcluded            // text: model
	detailTooSmall                // a: MiB wanted, b: card MiB
	detailShares                  // a: tenants, b: shares
	detailNotIdle                 // a: tenants
	detailCoresFull
	detailCores  // a: % wanted, b: % free
	detailMemory // a: MiB wanted, b: MiB free, c: card MiB
	detailQoS    // text: the card's class, text2: the pod's

	detailContextReserve // a: MiB wanted, b: the card's reserve MiB, c: % of the card asked (0: MiB asked)
	detailCordoned       // text: the administrator's reason
	detailInUse          // a: tenants booked on the card
	detailHeldIdleOnly
)

// Explain is the refusal's detail: Detail when set, else written from the figures
// the engine kept.
func (r CardReject) Explain() string {
	if r.Detail != "" {
		return r.Detail
	}
	d := r.why
	if s, ok := migExplain(d); ok {
		return s
	}
	switch d.kind {
	case detailNotInUUIDs:
		return "not in " + api.AnnotationGPUUUIDInclude
	case detailInUUIDs:
		return "listed in " + api.AnnotationGPUUUIDExclude
	case detailTypeMissing:
		return "model " + d.text + " matches nothing in " + api.AnnotationGPUTypeInclude
	case detailTypeExcluded:
		return "model " + d.text + " matches " + api.AnnotationGPUTypeExclude
	case detailContextReserve:
		return itoa(d.a) + " MiB wanted, a CUDA context takes " + itoa(d.b) + " MiB on this card (contextReserve)"
	case detailTooSmall:
		return itoa(d.a) + " MiB wanted, card has " + itoa(d.b) + " MiB"
	case detailShares:
		return itoa(d.a) + " of " + itoa(d.b) + " shares taken"
	case detailNotIdle:
		return "an exclusive (100% cores) request needs an idle card; " + itoa(d.a) + " tenants"
	case detailCoresFull:
		return "card's cores are fully taken"
	case detailCores:
		return itoa(d.a) + "% wanted, " + itoa(d.b) + "% free"
	case detailMemory:
		return itoa(d.a) + " MiB wanted, " + itoa(d.b) + " of " + itoa(d.c) + " MiB free"
	case detailQoS:
		return "card hosts " + d.text + " tasks, this pod is " + d.text2 + " (" + api.AnnotationQoS + ")"
	case detailCordoned:
		return d.text
	case detailInUse:
		return inUseText(d.a)
	case detailHeldIdleOnly:
		return "held by a pod that asked for idle cards only (" + api.AnnotationCardPolicy + ": " + string(api.PolicyIdleOnly) + ")"
	}
	return ""
}

func (r CardReject) String() string {
	s := fmt.Sprintf("card %d (%s): %s", r.Index, r.UUID, r.Reason)
	if d := r.Explain(); d != "" {
		s += ": " + d
	}
	return s
}

// FitError explains why a container found too few cards on a node.
type FitError struct {
	Node      string
	Container string
	Wanted    int
	Fitting   int
	Cards     int
	Rejects   []CardReject
	// NUMA is set when enough cards fit but no NUMA node has Wanted of them while
	// the pod asks for api.AnnotationNUMABind; it counts the fitting cards per node.
	NUMA string
	// MIGProfile is set when the pod asks for whole MIG instances of this profile:
	// Wanted and Fitting then count instances, not cards. MIGBusy counts the
	// instances of the profile that other pods hold on cards that pass the pod's
	// fixed filters: what evicting them could free.
	MIGProfile string
	MIGBusy    int
}

// ReasonTooFewCards and ReasonNUMA summarise refusals no single card explains.
const (
	ReasonTooFewCards Reason = "too few cards"
	ReasonNUMA        Reason = "not on one NUMA node"
)

// Dominant is the reason most cards gave (ties to the first in filter order), for
// metrics that count pending pods by reason.
func (e *FitError) Dominant() Reason {
	if e.NUMA != "" {
		return ReasonNUMA
	}
	best, n := ReasonTooFewCards, 0
	if e.MIGProfile != "" {
		best = ReasonMIGTaken // every card had some free, but not enough in all
	}
	counts := map[Reason]int{}
	for _, r := range e.Rejects {
		counts[r.Reason]++
		if c := counts[r.Reason]; c > n {
			best, n = r.Reason, c
		}
	}
	return best
}

// Error is the short, per-node summary that Volcano aggregates across nodes, e.g.
// `container "train" needs 2 cards, 1 of 8 fit (6 insufficient memory, 1 unhealthy)`.
// A caller that reports it (the scheduler plugin, the CLI) adds its own prefix.
func (e *FitError) Error() string {
	if e.Cards == 0 {
		return fmt.Sprintf("container %q needs %d cards, node has no vGPU cards", e.Container, e.Wanted)
	}
	if e.MIGProfile != "" {
		return e.migError()
	}
	if e.NUMA != "" {
		return fmt.Sprintf("container %q needs %d cards on one NUMA node (%s=true), %d of %d fit but not on one node (%s)",
			e.Container, e.Wanted, api.AnnotationNUMABind, e.Fitting, e.Cards, e.NUMA)
	}
	if d, ok := e.reserveRefusal(); ok {
		asks := itoa(d.a) + "Mi of vGPU memory"
		if d.c > 0 {
			asks = itoa(d.c) + "% of vGPU memory (" + itoa(d.a) + "Mi of a card on this node)"
		}
		return fmt.Sprintf("container %q asks %s; cards on this node need at least %dMi for a CUDA context (contextReserve)",
			e.Container, asks, d.b)
	}
	s := fmt.Sprintf("container %q needs %d cards, %d of %d fit (%s)", e.Container, e.Wanted, e.Fitting, e.Cards, e.histogram())
	if r, more, ok := e.cordonRefusal(); ok {
		s += ": " + CordonedText(r.UUID, r.why.text)
		if more > 0 {
			s += fmt.Sprintf(" (and %d more cordoned)", more)
		}
	} else if r, more, ok := e.idleRefusal(); ok {
		s += ": " + idleText(r)
		if more > 0 {
			s += fmt.Sprintf(" (and %d more)", more)
		}
	}
	return s
}

// CordonedText is how a cordoned card is named in a refusal, with the administrator's
// reason: "card GPU-… is cordoned: ECC errors".
func CordonedText(uuid, reason string) string {
	if reason == "" {
		return "card " + uuid + " is cordoned"
	}
	return "card " + uuid + " is cordoned: " + reason
}

// cordonRefusal is the first cordoned card, to be named with its reason when the
// cordons are what keep the container off the node (without them, enough cards would
// be left), and how many other cards are cordoned.
func (e *FitError) cordonRefusal() (first CardReject, more int, ok bool) {
	n := 0
	for _, r := range e.Rejects {
		if r.Reason != ReasonCordoned {
			continue
		}
		if n == 0 {
			first = r
		}
		n++
	}
	return first, n - 1, n > 0 && e.Fitting+n >= e.Wanted
}

// reserveRefusal is the context-reserve refusal to report instead of the card counts,
// when the reserve is what keeps the container off the node: without it, enough cards
// would be left. Of several, the card that needs the least, so that the figure quoted
// is the least request that could fit.
func (e *FitError) reserveRefusal() (rejectDetail, bool) {
	var least rejectDetail
	n := 0
	for _, r := range e.Rejects {
		if r.Reason != ReasonContextReserve || r.why.kind != detailContextReserve {
			continue
		}
		if n == 0 || r.why.b < least.b {
			least = r.why
		}
		n++
	}
	return least, n > 0 && e.Fitting+n >= e.Wanted
}

// Explained returns the refused cards with every Detail written.
func (e *FitError) Explained() []CardReject {
	if e.Rejects == nil {
		return nil
	}
	out := make([]CardReject, len(e.Rejects))
	for i, r := range e.Rejects {
		r.Detail = r.Explain()
		out[i] = r
	}
	return out
}

// Detail lists every refused card with the limit that failed.
func (e *FitError) Detail() string {
	parts := make([]string, len(e.Rejects))
	for i, r := range e.Rejects {
		parts[i] = r.String()
	}
	return e.Error() + ": " + strings.Join(parts, "; ")
}

// Targeted counts the node's cards that the request's own filters (its GPU type and
// UUID annotations) did not exclude: among nodes that all refuse a pod, the one with
// the most is the one the pod aims at, and its refusal is the one worth reporting.
func (e *FitError) Targeted() int {
	n := e.Cards
	for _, r := range e.Rejects {
		if r.Reason == ReasonUUIDFilter || r.Reason == ReasonTypeFilter {
			n--
		}
	}
	return n
}

// Resolvable reports whether the container could fit if other tenants left the
// node: enough of its cards fail only for usage (the filters apply the card's fixed
// properties first, so a card refused for usage passed every fixed filter). A node
// whose cards are of the wrong type, excluded, unhealthy or too small stays refused
// however many pods are evicted from it, so preemption and reclaim must not try.
func (e *FitError) Resolvable() bool {
	if e.MIGProfile != "" {
		return e.Cards > 0 && e.Fitting+e.MIGBusy >= e.Wanted
	}
	could := e.Fitting
	for _, r := range e.Rejects {
		if r.Reason.Resolvable() {
			could++
		}
	}
	return e.Cards > 0 && could >= e.Wanted
}

func (e *FitError) histogram() string {
	counts := map[Reason]int{}
	for _, r := range e.Rejects {
		counts[r.Reason]++
	}
	keys := make([]string, 0, len(counts))
	for r, n := range counts {
		keys = append(keys, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "too few cards on the node"
	}
	return strings.Join(keys, ", ")
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
