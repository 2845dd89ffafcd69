package book

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
)

// InFlight remembers assignments this scheduler made that the informer cache has
// not shown back yet. Volcano's cache marks a dispatched task Binding with the
// informer's copy of the pod, which lacks the annotations the Binding carries, so
// without this store the next session would see the cards as free and book them
// twice. It outlives sessions (its owner is the scheduler process); each session
// reconciles it against what it sees.
type InFlight struct {
	// mu guards entries: the allocate handlers of one session and the next
	// session's open may meet.
	mu      sync.Mutex
	entries map[types.UID]inFlightEntry
}

type inFlightEntry struct {
	assignment *api.PodAssignment
	created    time.Time
}

// NewInFlight returns an empty store.
func NewInFlight() *InFlight {
	return &InFlight{entries: make(map[types.UID]inFlightEntry)}
}

// Put records the assignment made for a pod at now.
func (s *InFlight) Put(uid types.UID, a *api.PodAssignment, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[uid] = inFlightEntry{assignment: a, created: now}
}

// Get returns the assignment in flight for a pod.
func (s *InFlight) Get(uid types.UID) (*api.PodAssignment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[uid]
	return e.assignment, ok
}

// Delete forgets a pod's assignment (its allocation was rolled back).
func (s *InFlight) Delete(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, uid)
}

// Len is how many assignments wait for the informer.
func (s *InFlight) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// PodView is what a session knows about a pod with an assignment in flight.
type PodView int

const (
	// PodAbsent: the session has no such pod; it was deleted.
	PodAbsent PodView = iota
	// PodUnplaced: the pod is pending without a node; its bind failed or it was only pipelined.
	PodUnplaced
	// PodInFlight: the task is binding or bound but the informer copy lacks the annotation.
	PodInFlight
	// PodConfirmed: the pod in the cache carries its assignment annotation.
	PodConfirmed
)

// Reconcile drops entries that the session shows are settled, or that are older than
// ttl, and reports how many it dropped.
func (s *InFlight) Reconcile(view func(types.UID) PodView, now time.Time, ttl time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	dropped := 0
	for uid, e := range s.entries {
		if v := view(uid); v != PodInFlight || now.Sub(e.created) > ttl {
			delete(s.entries, uid)
			dropped++
		}
	}
	return dropped
}
