package book

import (
	"sync"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Why a vGPU task stays pending, as the pending-task metric counts it: a card
// reason of the engine's (placement.Reason), or one of these.
const (
	PendingInvalid     = "invalid request"
	PendingNoInventory = "no usable vGPU inventory"
	PendingGang        = "gang does not fit"
	PendingNotTried    = "not tried"
	PendingQueueShare  = "queue at its share"
)

// Refusals counts, for one task, the reasons nodes gave in this session; nodes
// refuse on Volcano's parallel workers.
type Refusals struct {
	// mu guards counts.
	mu     sync.Mutex
	counts map[string]int
}

// Add counts one refusal for reason.
func (r *Refusals) Add(reason string) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[reason]++
	r.mu.Unlock()
}

// Dominant is the reason given most often (ties to the first in order), or
// PendingNotTried when no node refused.
func (r *Refusals) Dominant() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	best, n := PendingNotTried, 0
	for reason, c := range r.counts {
		if c > n || c == n && reason < best {
			best, n = reason, c
		}
	}
	return best
}

// refusalOf is the kind of an engine refusal, for the pending metric.
func refusalOf(ferr *placement.FitError) string { return string(ferr.Dominant()) }

// refusal is an engine refusal as the plugin reports it, under the plugin's name
// like every reason it gives.
func refusal(ferr *placement.FitError) string { return pluginargs.Plugin + ": " + ferr.Error() }
