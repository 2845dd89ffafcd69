package book

import (
	"sync"
	"sync/atomic"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// Pipelines are a session's pipelined vGPU tasks and the cards each expects once its
// victims are gone, indexed by node: preempt and reclaim read a node's many times.
type Pipelines struct {
	// mu guards byTask, byNode and hashes.
	mu     sync.RWMutex
	byTask map[vapi.TaskID]PipelinedFit
	byNode map[string]map[vapi.TaskID]PipelinedFit
	// hashes name each node's set of pipelined tasks (XOR of their UID hashes).
	hashes map[string]uint64
	// n counts the pipelined tasks: the predicate asks OnNode for every node, and
	// most sessions pipeline nothing.
	n atomic.Int64
}

// PipelinedFit is the cards a pipelined task expects once its victims are gone, and
// how it will hold them.
type PipelinedFit struct {
	Node       string
	Containers []api.ContainerAssignment
	Tenancy    placement.Tenancy
}

// NewPipelines returns an empty set.
func NewPipelines() *Pipelines {
	return &Pipelines{byTask: map[vapi.TaskID]PipelinedFit{}, byNode: map[string]map[vapi.TaskID]PipelinedFit{},
		hashes: map[string]uint64{}}
}

// Add records a pipelined task, replacing what it expected before.
func (ps *Pipelines) Add(id vapi.TaskID, f PipelinedFit) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.removeLocked(id)
	ps.byTask[id] = f
	if ps.byNode[f.Node] == nil {
		ps.byNode[f.Node] = map[vapi.TaskID]PipelinedFit{}
	}
	ps.byNode[f.Node][id] = f
	ps.hashes[f.Node] ^= uidHash(id)
	ps.n.Add(1)
}

// Remove forgets a task that is no longer pipelined.
func (ps *Pipelines) Remove(id vapi.TaskID) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.removeLocked(id)
}

func (ps *Pipelines) removeLocked(id vapi.TaskID) {
	f, ok := ps.byTask[id]
	if !ok {
		return
	}
	delete(ps.byTask, id)
	delete(ps.byNode[f.Node], id)
	ps.hashes[f.Node] ^= uidHash(id)
	ps.n.Add(-1)
}

// OnNode reports whether any task is pipelined onto node.
func (ps *Pipelines) OnNode(node string) bool {
	if ps.n.Load() == 0 {
		return false
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return len(ps.byNode[node]) > 0
}

// Get returns what a pipelined task expects.
func (ps *Pipelines) Get(id vapi.TaskID) (PipelinedFit, bool) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	f, ok := ps.byTask[id]
	return f, ok
}

// AccountOn books, on n (a copy of node's cards), what the tasks pipelined onto
// node expect.
func (ps *Pipelines) AccountOn(node string, n *placement.Node) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	for _, f := range ps.byNode[node] {
		n.Account(f.Containers, f.Tenancy)
	}
}

// Hash names the set of tasks pipelined onto node.
func (ps *Pipelines) Hash(node string) uint64 {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.hashes[node]
}
