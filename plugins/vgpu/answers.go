package vgpu

import (
	"sync"
	"sync/atomic"

	"github.com/tessera-gpu/tessera/placement"
)

// The predicate's memory of the engine's answers. Volcano asks the predicate of
// every node for every pending task, and node ordering of every feasible one: at
// 1,000 nodes and a few thousand tasks that is millions of questions a session, most
// of them asked before of a node that has not changed since. The answers are kept
// in one table, a row per request shape and a cell per node, laid out in the order
// Volcano walks the nodes: a task's predicates read one row from end to end. (Kept
// per node in a map by shape, the lookups were the plugin's largest cost after the
// engine, nearly all of it waiting on memory.)

// maxRememberedShapes bounds the table: the answers of the session's first shapes
// are remembered, later ones are computed on every call (a session sees tens of
// shapes; the bound only caps a pathological queue at a few MB per 1,000 nodes).
const maxRememberedShapes = 256

// fitAnswer is the engine's answer for one shape: a score, or a refusal.
type fitAnswer struct {
	score   float64
	refused *refusalNote
}

// refusalNote is a refusal with its message, kind (refusalOf, for the
// pending-task metrics) and whether evictions could clear it, worked out once when
// the engine refuses. The engine's per-card account is not kept: a session leaves
// hundreds of thousands of refusals in the table, all of it for the collector to scan.
type refusalNote struct {
	reason     string
	kind       string
	resolvable bool
}

func noteOf(ferr *placement.FitError) *refusalNote {
	return &refusalNote{reason: refusal(ferr), kind: refusalOf(ferr), resolvable: ferr.Resolvable()}
}

// answerTable holds rows of cells, [shape][node index]. Rows are added as shapes
// are first answered and never change size; the row list is replaced, not
// modified, so readers need no lock to find a row. A cell is guarded by its node's
// answerMu.
type answerTable struct {
	mu    sync.Mutex // serializes adding rows
	rows  atomic.Pointer[[][]answerCell]
	nodes int
	// bound is how many shapes are remembered (0: none, for the benchmark that
	// shows what remembering saves).
	bound int
}

// answerCell is one node's answer for one shape, computed at node version stamp-1
// (0: none).
type answerCell struct {
	stamp  uint64
	answer fitAnswer
}

// addColumn gives a new node its index; only while the ledger is being built.
func (t *answerTable) addColumn() int {
	t.nodes++
	return t.nodes - 1
}

func (t *answerTable) row(shape shapeID) []answerCell {
	rows := t.rows.Load()
	if rows == nil || int(shape) >= len(*rows) {
		return nil
	}
	return (*rows)[shape]
}

// lookup returns the node's answer for shape if it was computed at the node's
// current version (the caller holds the ledger's read lock).
func (t *answerTable) lookup(e *nodeEntry, shape shapeID) (fitAnswer, bool) {
	row := t.row(shape)
	if e.index >= len(row) {
		return fitAnswer{}, false
	}
	e.answerMu.Lock()
	c := row[e.index]
	e.answerMu.Unlock()
	return c.answer, c.stamp == e.version+1
}

// remember keeps an answer computed against the node at its current version; an
// answer of an older version never replaces a newer one.
func (t *answerTable) remember(e *nodeEntry, shape shapeID, a fitAnswer) {
	if int(shape) >= t.bound {
		return
	}
	row := t.row(shape)
	if row == nil {
		row = t.addRow(shape)
	}
	if e.index >= len(row) {
		return
	}
	stamp := e.version + 1
	e.answerMu.Lock()
	if c := &row[e.index]; c.stamp <= stamp {
		c.stamp, c.answer = stamp, a
	}
	e.answerMu.Unlock()
}

// addRow returns shape's row, adding it to a new row list if it has none.
func (t *answerTable) addRow(shape shapeID) []answerCell {
	t.mu.Lock()
	defer t.mu.Unlock()
	if row := t.row(shape); row != nil {
		return row
	}
	var old [][]answerCell
	if rows := t.rows.Load(); rows != nil {
		old = *rows
	}
	rows := make([][]answerCell, max(len(old), int(shape)+1))
	copy(rows, old)
	rows[shape] = make([]answerCell, t.nodes)
	t.rows.Store(&rows)
	return rows[shape]
}
