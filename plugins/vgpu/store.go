package vgpu

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
)

// pendingStore remembers assignments this scheduler made that the informer cache
// has not shown back yet. Volcano's cache marks a dispatched task Binding with the
// informer's copy of the pod, which lacks the annotations the Binding carries, so
// without this store the next session would see the cards as free and book them
// twice. It outlives sessions; each session reconciles it against what it sees.
type pendingStore struct {
	mu      sync.Mutex
	entries map[types.UID]pendingEntry
}

type pendingEntry struct {
	Assignment *api.PodAssignment
	Created    time.Time
}

func newPendingStore() *pendingStore {
	return &pendingStore{entries: make(map[types.UID]pendingEntry)}
}

func (s *pendingStore) put(uid types.UID, a *api.PodAssignment, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[uid] = pendingEntry{Assignment: a, Created: now}
}

func (s *pendingStore) get(uid types.UID) (*api.PodAssignment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[uid]
	return e.Assignment, ok
}

func (s *pendingStore) delete(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, uid)
}

func (s *pendingStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// podView is what a session knows about a pod with a pending entry.
type podView int

const (
	// podAbsent: the session has no such pod; it was deleted.
	podAbsent podView = iota
	// podUnplaced: the pod is pending without a node; its bind failed or it was only pipelined.
	podUnplaced
	// podInFlight: the task is binding or bound but the informer copy lacks the annotation.
	podInFlight
	// podConfirmed: the pod in the cache carries its assignment annotation.
	podConfirmed
)

// reconcile drops entries that the session shows are settled, or that are older than
// ttl, and reports how many it dropped.
func (s *pendingStore) reconcile(view func(types.UID) podView, now time.Time, ttl time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	dropped := 0
	for uid, e := range s.entries {
		if v := view(uid); v != podInFlight || now.Sub(e.Created) > ttl {
			delete(s.entries, uid)
			dropped++
		}
	}
	return dropped
}
