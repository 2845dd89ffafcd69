package scale

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Tracker watches the run's pods and notes when this process first saw each one bound:
// the end of its submit-to-bound latency.
type Tracker struct {
	mu      sync.Mutex
	boundAt map[string]time.Time // namespace/name → first seen with a node
	seenAt  map[string]time.Time // namespace/name → first seen at all (created)
	pods    map[string]*corev1.Pod
	factory informers.SharedInformerFactory
}

// Track starts watching the namespace's pods; it runs until ctx ends.
func Track(ctx context.Context, c kubernetes.Interface) (*Tracker, error) {
	t := &Tracker{boundAt: map[string]time.Time{}, seenAt: map[string]time.Time{}, pods: map[string]*corev1.Pod{}}
	t.factory = informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(Namespace))
	inf := t.factory.Core().V1().Pods().Informer()
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		key := p.Namespace + "/" + p.Name
		t.mu.Lock()
		defer t.mu.Unlock()
		t.pods[key] = p
		if _, seen := t.seenAt[key]; !seen {
			t.seenAt[key] = now
		}
		if _, seen := t.boundAt[key]; !seen && p.Spec.NodeName != "" {
			t.boundAt[key] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    see,
		UpdateFunc: func(_, obj any) { see(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				t.mu.Lock()
				delete(t.pods, p.Namespace+"/"+p.Name)
				t.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	t.factory.Start(ctx.Done())
	t.factory.WaitForCacheSync(ctx.Done())
	return t, nil
}

// Bound is how many pods have been seen bound.
func (t *Tracker) Bound() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.boundAt)
}

// BoundAt returns a copy of the bind times.
func (t *Tracker) BoundAt() map[string]time.Time { return t.copyTimes(t.boundAt) }

// SeenAt returns a copy of the times each pod was first seen (its creation, as
// the watch delivered it).
func (t *Tracker) SeenAt() map[string]time.Time { return t.copyTimes(t.seenAt) }

// copyTimes copies one of the tracker's time maps under its lock.
func (t *Tracker) copyTimes(m map[string]time.Time) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(m)
}

// Pods returns the pods as last seen.
func (t *Tracker) Pods() []*corev1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(t.pods))
	for _, p := range t.pods {
		out = append(out, p)
	}
	return out
}
