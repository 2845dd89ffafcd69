package book

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

// FitAnswer is the engine's answer for one shape: a score, or a refusal.
type FitAnswer struct {
	Score   float64
	Refused *RefusalNote
}

// RefusalNote is a refusal with its message, kind (refusalOf, for the pending-task
// metrics) and whether evictions could clear it, worked out once when the engine
// refuses. The engine's per-card account is not kept: a session leaves hundreds of
// thousands of refusals in the table, all of it for the collector to scan.
type RefusalNote struct {
	Reason     string
	Kind       string
	Resolvable bool
}

// NoteOf is the note of an engine refusal.
func NoteOf(ferr *placement.FitError) *RefusalNote {
	return &RefusalNote{Reason: refusal(ferr), Kind: refusalOf(ferr), Resolvable: ferr.Resolvable()}
}

// answerTable holds rows of cells, [shape][node column]. Rows are added as shapes
// are first answered and never change size; the row list is replaced, not
// modified, so readers need no lock to find a row. A cell is guarded by its
// column's lock.
type answerTable struct {
	// mu serializes adding rows; rows is read without it. nodes is written only
	// while the ledger is built.
	mu    sync.Mutex
	rows  atomic.Pointer[[][]answerCell]
	nodes int
	// bound is how many shapes are remembered (0: none, for the benchmark that
	// shows what remembering saves).
	bound int
}

// answerColumn is one node's place in the table.
type answerColumn struct {
	index int
	// mu guards the node's cells: Volcano predicates a task on many nodes in
	// parallel, each node once, so a lock per node keeps the writers apart.
	mu sync.Mutex
}

// answerCell is one node's answer for one shape, computed at node version stamp-1
// (0: none).
type answerCell struct {
	stamp  uint64
	answer FitAnswer
}

// addColumn gives a new node its column's index; only while the ledger is being built.
func (t *answerTable) addColumn() int {
	t.nodes++
	return t.nodes - 1
}

func (t *answerTable) row(shape ShapeID) []answerCell {
	rows := t.rows.Load()
	if rows == nil || int(shape) >= len(*rows) {
		return nil
	}
	return (*rows)[shape]
}

// lookup returns the answer of the node in column c for shape if it was computed at
// the node's version (the caller holds the ledger's read lock).
func (t *answerTable) lookup(c *answerColumn, version uint64, shape ShapeID) (FitAnswer, bool) {
	row := t.row(shape)
	if c.index >= len(row) {
		return FitAnswer{}, false
	}
	c.mu.Lock()
	cell := row[c.index]
	c.mu.Unlock()
	return cell.answer, cell.stamp == version+1
}

// remember keeps an answer computed against the node in column c at version; an
// answer of an older version never replaces a newer one.
func (t *answerTable) remember(c *answerColumn, version uint64, shape ShapeID, a FitAnswer) {
	if int(shape) >= t.bound {
		return
	}
	row := t.row(shape)
	if row == nil {
		row = t.addRow(shape)
	}
	if c.index >= len(row) {
		return
	}
	stamp := version + 1
	c.mu.Lock()
	if cell := &row[c.index]; cell.stamp <= stamp {
		cell.stamp, cell.answer = stamp, a
	}
	c.mu.Unlock()
}

// addRow returns shape's row, adding it to a new row list if it has none.
func (t *answerTable) addRow(shape ShapeID) []answerCell {
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
