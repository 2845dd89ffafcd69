package vgpu

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// ledger is one session's view of every vGPU card: capacity from the node
// inventories, usage from the pods the session sees and from assignments still in
// flight, kept in step with the session's allocate and deallocate events.
type ledger struct {
	mu    sync.RWMutex
	nodes map[string]*placement.Node
	// unusable explains nodes whose inventory cannot be used (malformed, stale).
	unusable map[string]string
	// cordoned nodes keep their pods' bookings but take no new tasks: their cards
	// are not part of the capacity the queues share.
	cordoned map[string]bool
	// booked are the assignments made in this session, by task.
	booked map[vapi.TaskID]*booking
	// changes counts the session's bookings and releases (under mu); sums holds the
	// cluster's free and total card capacity as of a changes count.
	changes uint64
	sums    atomic.Pointer[capacitySums]
	// entries holds what the ledger keeps per node beside its cards, found with one
	// lookup on the predicate's hot path.
	entries map[string]*nodeEntry
	// answers holds what the engine said of each request shape on each node while
	// the node is unchanged: tasks of one shape (a gang's members, the next job of
	// the same kind) fit or fail every unchanged node alike, and node ordering
	// reuses the predicate's score.
	answers answerTable
}

// nodeEntry is one node's cards and what is remembered against them.
type nodeEntry struct {
	node *placement.Node
	// version counts the node's bookings and releases (under the ledger's lock):
	// answers computed against the node hold while it is unchanged.
	version uint64
	// index is the node's column in the ledger's answer table (answers.go).
	index int
	// answerMu guards the node's cells of the answer table: Volcano predicates a
	// task on many nodes in parallel, each node once, so a lock per node keeps the
	// writers apart.
	answerMu sync.Mutex
	// evicts holds the last answer to "would the task fit once these victims are
	// gone": preempt and reclaim ask it of every node for every task.
	evicts evictSlot
}

// evictSlot is one node's last eviction answer, valid while the node is unchanged.
type evictSlot struct {
	mu      sync.Mutex
	key     evictKey
	version uint64
	set     bool
	answer  evictAnswer
	// epoch counts the session's changes to the node's vGPU tasks; tasks is the
	// node's vGPU tasks as of an epoch (nodetasks.go).
	epoch atomic.Uint64
	tasks *nodeTasks
}

// evictAnswer is what evicting on a node could do for a request.
type evictAnswer uint8

const (
	evictCannotHelp evictAnswer = iota // no victims the task may take free enough
	evictHelps                         // the plugin's victims make it fit
	evictNotNeeded                     // it fits once the pods being evicted are gone
)

// evictKey names a question: a request's shape and the set of victims released.
type evictKey struct {
	request shapeID
	// queue is the evicting task's: whether a candidate is reclaimed or preempted.
	queue   vapi.QueueID
	victims uint64
	count   int
}

type booking struct {
	node       string
	containers []api.ContainerAssignment
	qos        api.QoSClass
	// original is the task's pod before the annotations were added, restored when
	// the allocation is rolled back.
	original *corev1.Pod
}

func newLedger() *ledger {
	return &ledger{nodes: map[string]*placement.Node{}, unusable: map[string]string{}, cordoned: map[string]bool{},
		booked: map[vapi.TaskID]*booking{}, entries: map[string]*nodeEntry{},
		answers: answerTable{bound: maxRememberedShapes}}
}

// addNode registers a node's cards; only while the ledger is being built.
func (l *ledger) addNode(n *placement.Node) {
	l.nodes[n.Name] = n
	l.entries[n.Name] = &nodeEntry{node: n, index: l.answers.addColumn()}
}

// markUnusable records a node whose inventory cannot be used, and why; cordoned
// one whose cards take no new tasks. Only while the ledger is being built.
func (l *ledger) markUnusable(node, why string) { l.unusable[node] = why }
func (l *ledger) markCordoned(node string)      { l.cordoned[node] = true }

// counts is how many nodes have usable cards, how many were refused, and how many
// tasks the session booked: for the session's log lines.
func (l *ledger) counts() (nodes, unusable, booked int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.nodes), len(l.unusable), len(l.booked)
}

// book fits the request onto the node's cards as they are now and reserves them for
// the task; original is the task's pod as it was, restored if the booking is
// released. The error names the node; a refusal wraps the *placement.FitError.
func (l *ledger) book(task vapi.TaskID, node string, req *placement.Request, original *corev1.Pod) ([]api.ContainerAssignment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.nodes[node]
	if !ok {
		return nil, fmt.Errorf("node %s has no usable vGPU inventory", node)
	}
	fit, ferr := placement.FitPod(n, req)
	if ferr != nil {
		return nil, fmt.Errorf("no longer fits the cards of node %s: %w", node, ferr)
	}
	if err := n.Reserve(fit.Containers, req.Options.QoS); err != nil {
		return nil, fmt.Errorf("reserving cards on node %s: %w", node, err)
	}
	l.entries[node].version++
	l.changes++
	l.booked[task] = &booking{node: node, containers: fit.Containers, qos: req.Options.QoS, original: original}
	return fit.Containers, nil
}

// release gives back the cards the session booked for the task and returns the
// booking (its original pod); false when the session booked none for it.
func (l *ledger) release(task vapi.TaskID) (*booking, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.booked[task]
	if !ok {
		return nil, false
	}
	l.changes++
	if e, ok := l.entries[b.node]; ok {
		e.version++
		for _, err := range e.node.Release(b.containers, b.qos) {
			klog.ErrorS(err, "Releasing vGPU cards", "task", task, "node", b.node)
		}
	}
	delete(l.booked, task)
	return b, true
}

// held is what the session booked for the task, if anything.
func (l *ledger) held(task vapi.TaskID) ([]api.ContainerAssignment, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	b, ok := l.booked[task]
	if !ok {
		return nil, false
	}
	return b.containers, true
}

// eachCard calls fn for every card of every node with usable cards.
func (l *ledger) eachCard(fn func(node string, c *placement.CardState)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for name, n := range l.nodes {
		for i := range n.Cards {
			fn(name, &n.Cards[i])
		}
	}
}

// answer runs the engine for a request against a node's current usage, or answers
// from memory when the node is unchanged since it answered a request of the same
// shape (tasks with equal shapes fit alike). A refusal comes with its message and
// kind (refusalOf); why explains a node that has no usable cards.
func (l *ledger) answer(node string, shape shapeID, req *placement.Request) (a fitAnswer, why string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e, ok := l.entries[node]
	if !ok {
		if why, bad := l.unusable[node]; bad {
			return fitAnswer{}, why
		}
		return fitAnswer{}, "node has no vGPU inventory"
	}
	// The ledger's write lock bumps a version, so under the read lock the version
	// read here is the one the engine computes against.
	if a, ok := l.answers.lookup(e, shape); ok {
		return a, ""
	}
	n := e.node
	score, ferr := placement.ScorePod(n, req)
	a = fitAnswer{score: score}
	if ferr != nil {
		a.refused = noteOf(ferr)
		if v := klog.V(5); v.Enabled() {
			v.InfoS("vGPU engine refused", "node", node, "detail", ferr.Detail())
		}
	}
	l.answers.remember(e, shape, a)
	return a, ""
}

// evictAnswer returns the node's remembered answer to key, if the node has not
// changed since, and the node's version to remember a new answer under.
func (l *ledger) evictAnswer(node string, key evictKey) (answer evictAnswer, ok bool, version uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e, known := l.entries[node]
	if !known {
		return evictCannotHelp, false, 0
	}
	slot, version := &e.evicts, e.version
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.set && slot.key == key && slot.version == version {
		return slot.answer, true, version
	}
	return evictCannotHelp, false, version
}

// rememberEvict keeps an answer computed against the node at version.
func (l *ledger) rememberEvict(node string, key evictKey, version uint64, answer evictAnswer) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if e, known := l.entries[node]; known {
		slot := &e.evicts
		slot.mu.Lock()
		slot.key, slot.version, slot.set, slot.answer = key, version, true, answer
		slot.mu.Unlock()
	}
}

// cachedScore returns the node's score for a request of shape, the predicate's
// when the node has not changed since; ok is false when the request does not fit.
func (l *ledger) cachedScore(node string, shape shapeID, req *placement.Request) (float64, bool) {
	a, why := l.answer(node, shape, req)
	return a.score, why == "" && a.refused == nil
}

// clone returns a copy of one node's cards to compute on, or nil without inventory.
func (l *ledger) clone(node string) *placement.Node {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n, ok := l.nodes[node]; ok {
		return n.Clone()
	}
	return nil
}

// usage returns a copy of one node's cards, for metrics and tests.
func (l *ledger) usage(node string) []placement.CardState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n, ok := l.nodes[node]; ok {
		return append([]placement.CardState(nil), n.Cards...)
	}
	return nil
}

// free sums what the healthy cards of nodes that take tasks have free now. total sums
// what every healthy card would have with every tenant gone, cordoned nodes' too: a
// cordon is an operator's pause, not a smaller cluster, so a gang is not called one
// that can never fit while nodes are drained. Enqueue asks both of every job: the
// sums are kept until the next booking or release.
func (l *ledger) free() (demand, int64) {
	c := l.capacity()
	return c.free, c.freeSmallest
}

func (l *ledger) total() (demand, int64) {
	c := l.capacity()
	return c.total, c.totalSmallest
}

// capacitySums are free and total as of the ledger's changes count at.
type capacitySums struct {
	at                          uint64
	free, total                 demand
	freeSmallest, totalSmallest int64
}

func (l *ledger) capacity() capacitySums {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if c := l.sums.Load(); c != nil && c.at == l.changes {
		return *c
	}
	c := capacitySums{at: l.changes}
	l.forHealthyCards(false, func(card *placement.CardState) {
		c.totalSmallest = smallerMemory(c.totalSmallest, card.MemoryMiB)
		c.total.memoryMiB += card.CapacityMiB
		c.total.cores += 100
		c.total.slots += int64(card.Shares)
	})
	l.forHealthyCards(true, func(card *placement.CardState) {
		c.freeSmallest = smallerMemory(c.freeSmallest, card.MemoryMiB)
		c.free.memoryMiB += max(0, card.FreeMiB())
		c.free.cores += int64(max(0, card.FreeCores()))
		c.free.slots += int64(max(0, card.Shares-card.Used.Tenants))
	})
	l.sums.Store(&c)
	return c
}

func smallerMemory(smallest, mib int64) int64 {
	if smallest == 0 || mib < smallest {
		return mib
	}
	return smallest
}

// eachSchedulableCard calls fn for every card that can take vGPU tasks: healthy, not
// MIG, on a node that is not cordoned.
func (l *ledger) eachSchedulableCard(fn func(c *placement.CardState)) { l.eachHealthyCard(true, fn) }

// eachHealthyCard calls fn for every healthy card that is not MIG; withoutCordoned leaves
// out the cards of cordoned nodes.
func (l *ledger) eachHealthyCard(withoutCordoned bool, fn func(c *placement.CardState)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	l.forHealthyCards(withoutCordoned, fn)
}

// forHealthyCards is eachHealthyCard for a caller that holds the ledger's lock.
func (l *ledger) forHealthyCards(withoutCordoned bool, fn func(c *placement.CardState)) {
	for _, n := range l.nodes {
		if withoutCordoned && l.cordoned[n.Name] {
			continue
		}
		for i := range n.Cards {
			if c := &n.Cards[i]; c.Healthy && !c.MIG {
				fn(c)
			}
		}
	}
}

// cardTotals sums the schedulable memory and compute of every card that can take
// vGPU tasks (healthy, not MIG, on a node that is not cordoned), and the mean card
// memory.
func (l *ledger) cardTotals() (fairshare.Amount, int64) {
	var total fairshare.Amount
	var physical, cards int64
	l.eachSchedulableCard(func(c *placement.CardState) {
		total.MemoryMiB += float64(c.CapacityMiB)
		total.Cores += 100
		physical += c.MemoryMiB
		cards++
	})
	if cards == 0 {
		return total, 0
	}
	return total, physical / cards
}

// noCardsReason explains a cluster without usable vGPU nodes, naming a few of the
// nodes whose inventory was refused so that the operator sees the agent problem.
func (l *ledger) noCardsReason() string {
	if len(l.unusable) == 0 {
		return "no node has vGPU cards"
	}
	return "no node has usable vGPU cards (" + l.unusableSummary() + ")"
}

// unusableSummary names up to three nodes whose inventory was refused, and why.
func (l *ledger) unusableSummary() string {
	names := make([]string, 0, len(l.unusable))
	for n := range l.unusable {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names[:min(3, len(names))] {
		parts = append(parts, "node "+n+": "+l.unusable[n])
	}
	if len(names) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(names)-3))
	}
	return strings.Join(parts, "; ")
}

// neverFits returns why a request fits no node even with every card idle, or "",
// and the reason category for the pending metric.
func (l *ledger) neverFits(r *placement.Request) (why, category string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	why, category = l.noCardsReason(), pendingNoInventory
	// Report the refusal of the node the pod aims at (most cards past its own filters;
	// ties to the first name), not whichever node came last: a pod pinned to an
	// unhealthy card must hear "unhealthy", not another node's "excluded by UUID".
	best, bestNode := -1, ""
	for name, n := range l.nodes {
		idle := n.Clone()
		for i := range idle.Cards {
			idle.Cards[i].Used = placement.Usage{}
		}
		_, ferr := placement.FitPod(idle, r)
		if ferr == nil {
			return "", ""
		}
		if t := ferr.Targeted(); t > best || t == best && name < bestNode {
			best, bestNode = t, name
			why, category = refusal(ferr), refusalOf(ferr)
		}
	}
	if len(l.unusable) > 0 && len(l.nodes) > 0 {
		// The node that would fit may be one whose agent is gone: say so.
		why += "; nodes whose vGPU inventory is unusable: " + l.unusableSummary()
	}
	return why, category
}
