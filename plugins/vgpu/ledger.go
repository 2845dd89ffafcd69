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
	// version counts each node's bookings and releases, so a score computed by the
	// predicate can be reused by node ordering while the node is unchanged.
	version map[string]uint64
	// scores holds the predicate's last score per node, for node ordering.
	scores map[string]*scoreSlot
	// refusals holds, per node, the last refusal of a request shape, valid while
	// the node is unchanged: a full node refuses every waiting task alike.
	refusals map[string]*refusalSlot
	// evicts holds, per node, the last answer to "would the task fit once these
	// victims are gone": preempt and reclaim ask it of every node for every task.
	evicts map[string]*evictSlot
}

// refusalSlot is one node's last refusal of a request shape, with its message.
type refusalSlot struct {
	mu      sync.Mutex
	shape   string
	version uint64
	ferr    *placement.FitError
	reason  string
	kind    string // refusalOf(ferr), for the pending-task metrics
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
	request string
	// queue is the evicting task's: whether a candidate is reclaimed or preempted.
	queue   vapi.QueueID
	victims uint64
	count   int
}

// scoreSlot is one node's last computed score. Volcano predicates a task on many
// nodes in parallel, each node once, then orders them: a slot per node keeps the
// writers apart.
type scoreSlot struct {
	mu      sync.Mutex
	task    vapi.TaskID
	version uint64
	score   float64
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
		booked:  map[vapi.TaskID]*booking{},
		version: map[string]uint64{}, scores: map[string]*scoreSlot{}, evicts: map[string]*evictSlot{},
		refusals: map[string]*refusalSlot{}}
}

// addNode registers a node's cards; only while the ledger is being built.
func (l *ledger) addNode(n *placement.Node) {
	l.nodes[n.Name] = n
	l.scores[n.Name] = &scoreSlot{}
	l.evicts[n.Name] = &evictSlot{}
	l.refusals[n.Name] = &refusalSlot{}
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
	l.version[node]++
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
	l.version[b.node]++
	if n, ok := l.nodes[b.node]; ok {
		for _, err := range n.Release(b.containers, b.qos) {
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

// scoreShape is score for a request whose shape (tasks with equal shapes fit alike)
// is known: a refusal of the same shape by the unchanged node is answered from
// memory, with its message and kind (refusalOf).
func (l *ledger) scoreShape(task vapi.TaskID, node, shape string, req *placement.Request) (ferr *placement.FitError, reason, kind, why string) {
	l.mu.RLock()
	slot, ok := l.refusals[node]
	version := l.version[node]
	l.mu.RUnlock()
	if ok {
		slot.mu.Lock()
		hit := slot.ferr != nil && slot.shape == shape && slot.version == version
		ferr, reason, kind = slot.ferr, slot.reason, slot.kind
		slot.mu.Unlock()
		if hit {
			return ferr, reason, kind, ""
		}
	}
	ferr, why = l.score(task, node, req)
	if ferr == nil || why != "" {
		return ferr, "", "", why
	}
	reason, kind = refusal(ferr), refusalOf(ferr)
	if ok {
		slot.mu.Lock()
		slot.shape, slot.version, slot.ferr, slot.reason, slot.kind = shape, version, ferr, reason, kind
		slot.mu.Unlock()
	}
	return ferr, reason, kind, ""
}

// evictAnswer returns the node's remembered answer to key, if the node has not
// changed since, and the node's version to remember a new answer under.
func (l *ledger) evictAnswer(node string, key evictKey) (answer evictAnswer, ok bool, version uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	slot, known := l.evicts[node]
	if !known {
		return evictCannotHelp, false, 0
	}
	version = l.version[node]
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
	if slot, known := l.evicts[node]; known {
		slot.mu.Lock()
		slot.key, slot.version, slot.set, slot.answer = key, version, true, answer
		slot.mu.Unlock()
	}
}

// score runs the engine for a task against a node's current usage and remembers
// the score for node ordering. why explains a node that has no usable cards.
func (l *ledger) score(task vapi.TaskID, node string, req *placement.Request) (ferr *placement.FitError, why string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n, ok := l.nodes[node]
	if !ok {
		if why, bad := l.unusable[node]; bad {
			return nil, why
		}
		return nil, "node has no vGPU inventory"
	}
	s, ferr := placement.ScorePod(n, req)
	if ferr == nil {
		slot := l.scores[node]
		slot.mu.Lock()
		slot.task, slot.version, slot.score = task, l.version[node], s
		slot.mu.Unlock()
	}
	return ferr, ""
}

// cachedScore returns the node's score for the task, reusing the predicate's when
// the node has not changed since; ok is false when the task does not fit.
func (l *ledger) cachedScore(task vapi.TaskID, node string, req *placement.Request) (float64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n, ok := l.nodes[node]
	if !ok {
		return 0, false
	}
	slot := l.scores[node]
	slot.mu.Lock()
	hit := slot.task == task && slot.version == l.version[node]
	s := slot.score
	slot.mu.Unlock()
	if hit {
		return s, true
	}
	s, ferr := placement.ScorePod(n, req)
	return s, ferr == nil
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

// free sums what the cluster's healthy cards have free now; total what they would
// have with every tenant gone.
func (l *ledger) free() (demand, int64)  { return l.capacity(true) }
func (l *ledger) total() (demand, int64) { return l.capacity(false) }

func (l *ledger) capacity(free bool) (d demand, smallestMiB int64) {
	l.eachSchedulableCard(func(c *placement.CardState) {
		if smallestMiB == 0 || c.MemoryMiB < smallestMiB {
			smallestMiB = c.MemoryMiB
		}
		if !free {
			d.memoryMiB += c.CapacityMiB
			d.cores += 100
			d.slots += int64(c.Shares)
			return
		}
		d.memoryMiB += max(0, c.FreeMiB())
		d.cores += int64(max(0, c.FreeCores()))
		d.slots += int64(max(0, c.Shares-c.Used.Tenants))
	})
	return d, smallestMiB
}

// eachSchedulableCard calls fn for every card that can take vGPU tasks: healthy, not
// MIG, on a node that is not cordoned.
func (l *ledger) eachSchedulableCard(fn func(c *placement.CardState)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, n := range l.nodes {
		if l.cordoned[n.Name] {
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
