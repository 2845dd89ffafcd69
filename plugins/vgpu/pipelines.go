package vgpu

import (
	"sync"
	"sync/atomic"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
)

// pipelines are a session's pipelined vGPU tasks and the cards each expects once its
// victims are gone, indexed by node: preempt and reclaim read a node's many times.
type pipelines struct {
	mu     sync.RWMutex
	byTask map[vapi.TaskID]pipelinedFit
	byNode map[string]map[vapi.TaskID]pipelinedFit
	// hashes name each node's set of pipelined tasks (XOR of their UID hashes).
	hashes map[string]uint64
	// n counts the pipelined tasks: the predicate asks onNode for every node, and
	// most sessions pipeline nothing.
	n atomic.Int64
}

// pipelinedFit is the cards a pipelined task expects once its victims are gone.
type pipelinedFit struct {
	node       string
	containers []api.ContainerAssignment
	qos        api.QoSClass
}

func newPipelines() *pipelines {
	return &pipelines{byTask: map[vapi.TaskID]pipelinedFit{}, byNode: map[string]map[vapi.TaskID]pipelinedFit{},
		hashes: map[string]uint64{}}
}

func (ps *pipelines) add(id vapi.TaskID, f pipelinedFit) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.removeLocked(id)
	ps.byTask[id] = f
	if ps.byNode[f.node] == nil {
		ps.byNode[f.node] = map[vapi.TaskID]pipelinedFit{}
	}
	ps.byNode[f.node][id] = f
	ps.hashes[f.node] ^= uidHash(id)
	ps.n.Add(1)
}

func (ps *pipelines) remove(id vapi.TaskID) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.removeLocked(id)
}

func (ps *pipelines) removeLocked(id vapi.TaskID) {
	f, ok := ps.byTask[id]
	if !ok {
		return
	}
	delete(ps.byTask, id)
	delete(ps.byNode[f.node], id)
	ps.hashes[f.node] ^= uidHash(id)
	ps.n.Add(-1)
}

// onNode reports whether any task is pipelined onto node.
func (ps *pipelines) onNode(node string) bool {
	if ps.n.Load() == 0 {
		return false
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return len(ps.byNode[node]) > 0
}

// get returns what a pipelined task expects.
func (ps *pipelines) get(id vapi.TaskID) (pipelinedFit, bool) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	f, ok := ps.byTask[id]
	return f, ok
}

// each calls fn for every task pipelined onto node.
func (ps *pipelines) each(node string, fn func(pipelinedFit)) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	for _, f := range ps.byNode[node] {
		fn(f)
	}
}

// hash names the set of tasks pipelined onto node.
func (ps *pipelines) hash(node string) uint64 {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.hashes[node]
}
