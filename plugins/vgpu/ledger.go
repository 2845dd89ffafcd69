package vgpu

import (
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/plugins/engine"
)

// ledger is one session's view of every vGPU card: capacity from the node
// inventories, usage from the pods the session sees and from assignments still in
// flight, kept in step with the session's allocate and deallocate events.
type ledger struct {
	mu    sync.RWMutex
	nodes map[string]*engine.Node
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
	ferr    *engine.FitError
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
	return &ledger{nodes: map[string]*engine.Node{}, unusable: map[string]string{}, cordoned: map[string]bool{},
		booked:  map[vapi.TaskID]*booking{},
		version: map[string]uint64{}, scores: map[string]*scoreSlot{}, evicts: map[string]*evictSlot{},
		refusals: map[string]*refusalSlot{}}
}

// addNode registers a node's cards; only while the ledger is being built.
func (l *ledger) addNode(n *engine.Node) {
	l.nodes[n.Name] = n
	l.scores[n.Name] = &scoreSlot{}
	l.evicts[n.Name] = &evictSlot{}
	l.refusals[n.Name] = &refusalSlot{}
}

// scoreShape is score for a request whose shape (tasks with equal shapes fit alike)
// is known: a refusal of the same shape by the unchanged node is answered from
// memory, with its message and kind (refusalOf).
func (l *ledger) scoreShape(task vapi.TaskID, node, shape string, req *engine.Request) (ferr *engine.FitError, reason, kind, why string) {
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
	reason, kind = ferr.Error(), refusalOf(ferr)
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
func (l *ledger) score(task vapi.TaskID, node string, req *engine.Request) (ferr *engine.FitError, why string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n, ok := l.nodes[node]
	if !ok {
		if why, bad := l.unusable[node]; bad {
			return nil, why
		}
		return nil, "node has no vGPU inventory"
	}
	s, ferr := engine.ScorePod(n, req)
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
func (l *ledger) cachedScore(task vapi.TaskID, node string, req *engine.Request) (float64, bool) {
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
	s, ferr := engine.ScorePod(n, req)
	return s, ferr == nil
}

// clone returns a copy of one node's cards to compute on, or nil without inventory.
func (l *ledger) clone(node string) *engine.Node {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n, ok := l.nodes[node]; ok {
		return n.Clone()
	}
	return nil
}

// usage returns a copy of one node's cards, for metrics and tests.
func (l *ledger) usage(node string) []engine.CardState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n, ok := l.nodes[node]; ok {
		return append([]engine.CardState(nil), n.Cards...)
	}
	return nil
}
