package assignkeys

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// Watcher follows the ConfigMap of public keys the scheduler publishes and keeps the
// Verifier built from it. An agent needs read access to that one ConfigMap only.
type Watcher struct {
	Client    kubernetes.Interface
	ConfigMap types.NamespacedName
	// SyncWait bounds the wait for the first read at start (default 30 s).
	SyncWait time.Duration

	current atomic.Pointer[state]
}

// state is the verifier and why it may be empty.
type state struct {
	v   *api.Verifier
	err error
}

// Verifier returns the keys read last, or an error saying why there are none.
func (w *Watcher) Verifier() (*api.Verifier, error) {
	s := w.current.Load()
	if s == nil {
		return nil, fmt.Errorf("%w: the ConfigMap %s of the scheduler's keys has not been read yet", api.ErrUnknownKey, w.ConfigMap)
	}
	return s.v, s.err
}

// Start watches the ConfigMap until ctx ends and waits for the first list. A missing
// ConfigMap is not an error here (the scheduler may start later): every assignment is
// refused until it appears.
func (w *Watcher) Start(ctx context.Context) error {
	byName := fields.OneTermEqualSelector("metadata.name", w.ConfigMap.Name).String()
	cms := w.Client.CoreV1().ConfigMaps(w.ConfigMap.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return cms.Watch(ctx, o)
		},
	}
	w.current.Store(&state{err: fmt.Errorf("%w: the ConfigMap %s of the scheduler's keys does not exist (is the scheduler running with signing on?)", api.ErrUnknownKey, w.ConfigMap)})
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	set := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == w.ConfigMap.Name {
			w.read(cm)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(any) {
			w.current.Store(&state{err: fmt.Errorf("%w: the ConfigMap %s of the scheduler's keys was deleted", api.ErrUnknownKey, w.ConfigMap)})
			klog.ErrorS(nil, "The scheduler's assignment keys were deleted; every new assignment is refused until they are published again", "configMap", w.ConfigMap)
		},
	}); err != nil {
		return fmt.Errorf("watch %s: %w", w.ConfigMap, err)
	}
	go inf.Run(ctx.Done())
	// A watch that cannot list (no permission, API server away) keeps retrying in the
	// background; meanwhile every assignment is refused, and the agent serves the rest.
	wait := w.SyncWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	first, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(first.Done(), inf.HasSynced) {
		if ctx.Err() != nil {
			return fmt.Errorf("watch of ConfigMap %s did not sync: %w", w.ConfigMap, ctx.Err())
		}
		klog.ErrorS(nil, "The scheduler's assignment keys could not be read yet; every assignment is refused until they are (check the agent's permission to read the ConfigMap)",
			"configMap", w.ConfigMap, "waited", wait)
	}
	return nil
}

// read replaces the verifier with the ConfigMap's keys; a malformed document keeps
// nothing (refusing is safe, guessing is not).
func (w *Watcher) read(cm *corev1.ConfigMap) {
	s, ok := cm.Data[api.VerificationKeysDataKey]
	if !ok {
		w.current.Store(&state{err: fmt.Errorf("%w: ConfigMap %s has no %s", api.ErrUnknownKey, w.ConfigMap, api.VerificationKeysDataKey)})
		return
	}
	ks, err := api.DecodeKeySet(s, false)
	if err != nil {
		w.current.Store(&state{err: fmt.Errorf("ConfigMap %s: %w", w.ConfigMap, err)})
		klog.ErrorS(err, "The scheduler's assignment keys cannot be read; every new assignment is refused", "configMap", w.ConfigMap)
		return
	}
	w.current.Store(&state{v: ks.Verifier()})
	klog.InfoS("Assignment verification keys read", "configMap", w.ConfigMap, "keys", keyIDs(ks))
}

// Static is a fixed set of keys (tests, and agents given the keys by file).
type Static struct{ V *api.Verifier }

// Verifier returns the fixed keys.
func (s Static) Verifier() (*api.Verifier, error) { return s.V, nil }
