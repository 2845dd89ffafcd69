package kubeletsim

import (
	"context"
	"time"
)

// WaitFor polls cond (called without the lock) until it holds or ctx ends.
func (k *Kubelet) WaitFor(ctx context.Context, cond func(k *Kubelet) bool) error {
	for !cond(k) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// RegisteredAtLeast is a WaitFor condition: n registrations, a plugin still serving and a
// device list.
func RegisteredAtLeast(n int) func(*Kubelet) bool {
	return func(k *Kubelet) bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.registered >= n && k.plugin != nil && len(k.health) > 0
	}
}
