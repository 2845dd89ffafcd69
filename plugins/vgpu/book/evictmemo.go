package book

import (
	"sync"
	"sync/atomic"

	vapi "volcano.sh/volcano/pkg/scheduler/api"
)

// The eviction memo: preempt and reclaim ask the predicate of every node, for every
// pending task, whether evicting there could help, and the answer takes a fit per
// candidate set. Each node remembers its last answer while the node's bookings and
// the question (request shape, evicting queue, victim set) are unchanged, and its
// vGPU tasks as of its last change (NodeTasks).

// EvictAnswer is what evicting on a node could do for a request.
type EvictAnswer uint8

const (
	EvictCannotHelp EvictAnswer = iota // no victims the task may take free enough
	EvictHelps                         // the plugin's victims make it fit
	EvictNotNeeded                     // it fits once the pods being evicted are gone
)

// EvictKey names a question: a request's shape and the set of victims released.
type EvictKey struct {
	Request ShapeID
	// Queue is the evicting task's: whether a candidate is reclaimed or preempted.
	Queue   vapi.QueueID
	Victims uint64
	Count   int
}

// evictSlot is one node's eviction memo.
type evictSlot struct {
	// mu guards key, version, set, answer and tasks; epoch is atomic.
	mu      sync.Mutex
	key     EvictKey
	version uint64
	set     bool
	answer  EvictAnswer
	// epoch counts the session's changes to the node's vGPU tasks (touch); tasks is
	// the node's vGPU tasks as of an epoch.
	epoch atomic.Uint64
	tasks *NodeTasks
}

// answerTo returns the answer to key remembered at the node's version.
func (s *evictSlot) answerTo(key EvictKey, version uint64) (EvictAnswer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set && s.key == key && s.version == version {
		return s.answer, true
	}
	return EvictCannotHelp, false
}

// remember keeps the answer to key computed at the node's version.
func (s *evictSlot) remember(key EvictKey, version uint64, answer EvictAnswer) {
	s.mu.Lock()
	s.key, s.version, s.set, s.answer = key, version, true, answer
	s.mu.Unlock()
}

// nodeTasks returns the node's vGPU tasks, built again only when the node changed
// (touch, or a task added or removed without the plugin's handlers).
func (s *evictSlot) nodeTasks(node *vapi.NodeInfo, jobs map[vapi.JobID]*vapi.JobInfo, isVGPU func(*vapi.TaskInfo) bool) *NodeTasks {
	epoch := s.epoch.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if nt := s.tasks; nt != nil && nt.epoch == epoch && nt.count == len(node.Tasks) {
		return nt
	}
	s.tasks = buildNodeTasks(node, jobs, epoch, isVGPU)
	return s.tasks
}

// touch records that a vGPU task on the node changed state.
func (s *evictSlot) touch() { s.epoch.Add(1) }
