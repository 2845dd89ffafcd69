package book

import (
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// Ledger is one session's view of every vGPU card: capacity from the node
// inventories, usage from the pods the session sees and from assignments still in
// flight, kept in step with the session's allocate and deallocate events. It is built
// once (AddNode, MarkUnusable, MarkCordoned) before the session's hooks run, then
// read and written from Volcano's parallel workers.
type Ledger struct {
	// mu guards nodes' cards, booked, changes and each entry's version; nodes,
	// unusable, cordoned and entries themselves are written only while the ledger is
	// built. Each node's answers and eviction memo have locks of their own.
	mu    sync.RWMutex
	nodes map[string]*placement.Node
	// unusable explains nodes whose inventory cannot be used (malformed, stale).
	unusable map[string]string
	// cordoned nodes keep their pods' bookings but take no new tasks: their cards
	// are not part of the capacity the queues share.
	cordoned map[string]bool
	// booked are the assignments made in this session, by task.
	booked map[vapi.TaskID]*Booking
	// changes counts the session's bookings and releases; sums holds the cluster's
	// free and total card capacity as of a changes count (capacity.go).
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
	// dra holds the cards of DRA nodes and what their claims consume (dra.go).
	dra draCards
}

// nodeEntry is one node's cards and what is remembered against them.
type nodeEntry struct {
	node *placement.Node
	// version counts the node's bookings and releases (under the ledger's mu):
	// answers computed against the node hold while it is unchanged.
	version uint64
	// column is the node's place in the ledger's answer table.
	column answerColumn
	// evicts holds what preempt and reclaim asked of the node last.
	evicts evictSlot
}

// Booking is what the session booked for one task.
type Booking struct {
	Node       string
	Containers []api.ContainerAssignment
	Tenancy    placement.Tenancy
	// Original is the task's pod before the assignment was written on it, restored
	// when the allocation is rolled back.
	Original *corev1.Pod
}

// NewLedger returns a ledger without nodes.
func NewLedger() *Ledger {
	return &Ledger{nodes: map[string]*placement.Node{}, unusable: map[string]string{}, cordoned: map[string]bool{},
		booked: map[vapi.TaskID]*Booking{}, entries: map[string]*nodeEntry{},
		answers: answerTable{bound: maxRememberedShapes}}
}

// AddNode registers a node's cards; only while the ledger is being built.
func (l *Ledger) AddNode(n *placement.Node) {
	l.nodes[n.Name] = n
	l.entries[n.Name] = &nodeEntry{node: n, column: answerColumn{index: l.answers.addColumn()}}
}

// MarkUnusable records a node whose inventory cannot be used, and why; MarkCordoned
// one whose cards take no new tasks. Only while the ledger is being built.
func (l *Ledger) MarkUnusable(node, why string) { l.unusable[node] = why }
func (l *Ledger) MarkCordoned(node string)      { l.cordoned[node] = true }

// Counts is how many nodes have usable cards, how many were refused, and how many
// tasks the session booked: for the session's log lines.
func (l *Ledger) Counts() (nodes, unusable, booked int) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.nodes), len(l.unusable), len(l.booked)
}

// Book fits the request onto the node's cards as they are now and reserves them for
// the task; original is the task's pod as it was, restored if the booking is
// released. The error names the node; a refusal wraps the *placement.FitError.
func (l *Ledger) Book(task vapi.TaskID, node string, req *placement.Request, original *corev1.Pod) ([]api.ContainerAssignment, error) {
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
	if err := n.Reserve(fit.Containers, req.Tenancy()); err != nil {
		return nil, fmt.Errorf("reserving cards on node %s: %w", node, err)
	}
	l.entries[node].version++
	l.changes++
	l.booked[task] = &Booking{Node: node, Containers: fit.Containers, Tenancy: req.Tenancy(), Original: original}
	return fit.Containers, nil
}

// Release gives back the cards the session booked for the task and returns the
// booking (its original pod); false when the session booked none for it.
func (l *Ledger) Release(task vapi.TaskID) (*Booking, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.booked[task]
	if !ok {
		return nil, false
	}
	l.changes++
	if e, ok := l.entries[b.Node]; ok {
		e.version++
		for _, err := range e.node.Release(b.Containers, b.Tenancy) {
			klog.ErrorS(err, "Releasing vGPU cards", "task", task, "node", b.Node)
		}
	}
	delete(l.booked, task)
	return b, true
}

// Held is what the session booked for the task, if anything.
func (l *Ledger) Held(task vapi.TaskID) ([]api.ContainerAssignment, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	b, ok := l.booked[task]
	if !ok {
		return nil, false
	}
	return b.Containers, true
}

// EachCard calls fn for every card of every node with usable cards, and of every
// DRA node (their usage is their claims').
func (l *Ledger) EachCard(fn func(node string, c *placement.CardState)) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for name, n := range l.nodes {
		for i := range n.Cards {
			fn(name, &n.Cards[i])
		}
	}
	l.dra.each(fn)
}

// Clone returns a copy of one node's cards to compute on, or nil without inventory.
func (l *Ledger) Clone(node string) *placement.Node {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n, ok := l.nodes[node]; ok {
		return n.Clone()
	}
	return nil
}

// Answer runs the engine for a request against a node's current usage, or answers
// from memory when the node is unchanged since it answered a request of the same
// shape (tasks with equal shapes fit alike). A refusal comes with its message and
// kind; why explains a node that has no usable cards.
func (l *Ledger) Answer(node string, shape ShapeID, req *placement.Request) (a FitAnswer, why string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e, ok := l.entries[node]
	if !ok {
		if why, bad := l.unusable[node]; bad {
			return FitAnswer{}, why
		}
		return FitAnswer{}, "node has no vGPU inventory"
	}
	// The ledger's write lock bumps a version, so under the read lock the version
	// read here is the one the engine computes against.
	if a, ok := l.answers.lookup(&e.column, e.version, shape); ok {
		return a, ""
	}
	score, ferr := placement.ScorePod(e.node, req)
	a = FitAnswer{Score: score}
	if ferr != nil {
		a.Refused = NoteOf(ferr)
		if v := klog.V(5); v.Enabled() {
			v.InfoS("vGPU engine refused", "node", node, "detail", ferr.Detail())
		}
	}
	l.answers.remember(&e.column, e.version, shape, a)
	return a, ""
}

// CachedScore returns the node's score for a request of shape, the predicate's when
// the node has not changed since; ok is false when the request does not fit.
func (l *Ledger) CachedScore(node string, shape ShapeID, req *placement.Request) (float64, bool) {
	a, why := l.Answer(node, shape, req)
	return a.Score, why == "" && a.Refused == nil
}

// EvictAnswer returns the node's remembered answer to key, if the node has not
// changed since, and the node's version to remember a new answer under.
func (l *Ledger) EvictAnswer(node string, key EvictKey) (answer EvictAnswer, ok bool, version uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	e, known := l.entries[node]
	if !known {
		return EvictCannotHelp, false, 0
	}
	answer, ok = e.evicts.answerTo(key, e.version)
	return answer, ok, e.version
}

// RememberEvict keeps an answer computed against the node at version.
func (l *Ledger) RememberEvict(node string, key EvictKey, version uint64, answer EvictAnswer) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if e, known := l.entries[node]; known {
		e.evicts.remember(key, version, answer)
	}
}

// NodeTasks returns the node's vGPU tasks, built again only when the node changed.
func (l *Ledger) NodeTasks(node *vapi.NodeInfo, jobs map[vapi.JobID]*vapi.JobInfo, isVGPU func(*vapi.TaskInfo) bool) *NodeTasks {
	l.mu.RLock()
	e, ok := l.entries[node.Name]
	l.mu.RUnlock()
	if !ok {
		return buildNodeTasks(node, jobs, 0, isVGPU)
	}
	return e.evicts.nodeTasks(node, jobs, isVGPU)
}

// Touch records that a vGPU task on the node changed state in this session.
func (l *Ledger) Touch(node string) {
	l.mu.RLock()
	e, ok := l.entries[node]
	l.mu.RUnlock()
	if ok {
		e.evicts.touch()
	}
}
