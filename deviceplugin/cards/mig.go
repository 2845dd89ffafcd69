package cards

import (
	"slices"

	"github.com/tessera-gpu/tessera/api"
)

// SetMIGLayout records a card's MIG instances and slot count after its layout was
// changed on the node, and notifies subscribers (the publisher rewrites the node's
// annotations, the kubelet server sends the new slot list) when either changed. It
// reports whether anything changed; an unknown card changes nothing.
func (r *Registry) SetMIGLayout(uuid string, instances []api.MIGInstance, shares int) bool {
	r.mu.Lock()
	i, ok := r.byUUID[uuid]
	if !ok || shares < 1 || (r.cards[i].Shares == shares && slices.Equal(r.cards[i].MIGInstances, instances)) {
		r.mu.Unlock()
		return false
	}
	r.cards[i].MIGInstances = append([]api.MIGInstance{}, instances...)
	r.cards[i].Shares = shares
	r.notifyAndUnlock()
	return true
}
