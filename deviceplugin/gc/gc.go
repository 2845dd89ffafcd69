// Package gc finishes interrupted handoffs and removes the per-container directories of
// pods that are gone.
package gc

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// Maintainer finishes interrupted handoffs and removes the directories of pods that
// are gone. A pod is gone when the informer (synced) no longer has its UID and the
// kubelet no longer tracks its name, continuously for the grace period: a directory a
// container may still have mounted is never removed.
type Maintainer struct {
	pods     handoff.PodLookup
	store    *records.Store
	kubelet  handoff.KubeletPods
	complete func(context.Context, *corev1.Pod) bool
	now      func() time.Time
	grace    time.Duration
	gone     map[string]time.Time
}

// New returns a Maintainer over the agent's pods, directories and kubelet; complete
// finishes a live pod's handoff mark (Handoff.MarkIfComplete). Only one goroutine may
// call Run or Once.
func New(pods handoff.PodLookup, store *records.Store, kubelet handoff.KubeletPods, complete func(context.Context, *corev1.Pod) bool, grace time.Duration) *Maintainer {
	return &Maintainer{pods: pods, store: store, kubelet: kubelet, complete: complete, now: time.Now, grace: grace, gone: map[string]time.Time{}}
}

// Run calls Once every interval until ctx ends.
func (m *Maintainer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once runs one pass and returns the UIDs whose directories it removed.
func (m *Maintainer) Once(ctx context.Context) []string {
	if !m.pods.Synced() {
		return nil
	}
	recs, err := m.store.Records()
	if err != nil {
		klog.ErrorS(err, "Cannot list container directories")
		return nil
	}
	tracked, err := m.kubeletNames(ctx)
	if err != nil {
		klog.ErrorS(err, "Cannot ask the kubelet which pods it tracks; keeping every directory this pass")
		return nil
	}
	now := m.now()
	var removed []string
	for uid, rs := range recs {
		if m.pods.Exists(types.UID(uid)) {
			delete(m.gone, uid)
			if len(rs) > 0 {
				if pod, ok := m.pods.Get(rs[0].Namespace, rs[0].Pod); ok && string(pod.UID) == uid {
					m.complete(ctx, pod)
				}
			}
			continue
		}
		if kubeletKeeps(rs, tracked) {
			delete(m.gone, uid)
			continue
		}
		since, seen := m.gone[uid]
		if !seen {
			m.gone[uid] = now
			continue
		}
		if now.Sub(since) < m.grace {
			continue
		}
		if err := m.store.RemovePod(uid); err != nil {
			klog.ErrorS(err, "Cannot remove directories of a pod that is gone", "uid", uid)
			continue
		}
		delete(m.gone, uid)
		removed = append(removed, uid)
		klog.V(2).InfoS("Removed directories of a pod that is gone", "uid", uid)
	}
	return removed
}

func (m *Maintainer) kubeletNames(ctx context.Context) (map[string]bool, error) {
	list, err := m.kubelet.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(list))
	for _, p := range list {
		out[p.GetNamespace()+"/"+p.GetName()] = true
	}
	return out, nil
}

// kubeletKeeps reports whether the kubelet still tracks a pod of that name; the API
// omits UIDs, so a namesake keeps the directory too, which errs on the safe side.
func kubeletKeeps(rs []*records.Record, tracked map[string]bool) bool {
	for _, r := range rs {
		if tracked[r.Namespace+"/"+r.Pod] {
			return true
		}
	}
	return false
}
