package handoff

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// Maintainer finishes interrupted handoffs and removes the directories of pods that
// are gone. A pod is gone when the informer (synced) no longer has its UID and the
// kubelet no longer tracks its name, continuously for the grace period: a directory a
// container may still have mounted is never removed.
type Maintainer struct {
	h     *Handoff
	grace time.Duration
	gone  map[string]time.Time
}

// NewMaintainer returns a Maintainer; only one goroutine may call Run or Once.
func NewMaintainer(h *Handoff, grace time.Duration) *Maintainer {
	return &Maintainer{h: h, grace: grace, gone: map[string]time.Time{}}
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
	h := m.h
	if !h.pods.Synced() {
		return nil
	}
	recs, err := h.store.Records()
	if err != nil {
		klog.ErrorS(err, "Cannot list container directories")
		return nil
	}
	tracked, err := m.kubeletNames(ctx)
	if err != nil {
		klog.ErrorS(err, "Cannot ask the kubelet which pods it tracks; keeping every directory this pass")
		return nil
	}
	now := h.now()
	var removed []string
	for uid, rs := range recs {
		if h.pods.Exists(types.UID(uid)) {
			delete(m.gone, uid)
			if len(rs) > 0 {
				if pod, ok := h.pods.Get(rs[0].Namespace, rs[0].Pod); ok && string(pod.UID) == uid {
					h.markIfComplete(ctx, pod)
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
		if err := h.store.RemovePod(uid); err != nil {
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
	list, err := m.h.kubelet.List(ctx)
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
