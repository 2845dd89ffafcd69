// Package uninstall removes the files the node agent and its init container put on the
// host (the hook library, the ld.so.preload file, the state directory, the hook library's
// CDI spec) when the chart is
// uninstalled, and only once no container on the node can still use them.
//
// An agent stops for three reasons: a restart or an upgrade (a new agent comes and uses
// the files), the node draining, or `helm uninstall`. Only the last deletes the agent's
// DaemonSet, so the agent watches it: Helm deletes the DaemonSet before the RBAC objects
// and the ServiceAccount, and the watch that is already open delivers the deletion even
// after the agent's credentials are gone. When the agent is stopped after that, it asks
// the kubelet (its PodResources socket: local, no credentials needed) which pods hold the
// node's vGPU slots; with none, it removes the files; with some, it leaves them and says
// which pods hold them (docs/install.md says how to remove them later).
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/records"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Watch tells whether the agent's DaemonSet has been deleted (or is being deleted).
type Watch struct {
	Client          kubernetes.Interface
	Namespace, Name string

	once sync.Once
	gone chan struct{}
}

func (w *Watch) init() { w.once.Do(func() { w.gone = make(chan struct{}) }) }

// Run watches the DaemonSet until ctx ends. It returns once the watch has synced.
func (w *Watch) Run(ctx context.Context) error {
	w.init()
	f := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithNamespace(w.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.Name).String()
		}))
	inf := f.Apps().V1().DaemonSets().Informer()
	var seen bool
	var mu sync.Mutex
	mark := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-w.gone:
		default:
			klog.InfoS("The agent's DaemonSet is being removed: host files go when the agent stops, if no pod holds the node's cards",
				"daemonSet", klog.KRef(w.Namespace, w.Name), "seen", why)
			close(w.gone)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			ds, ok := obj.(*appsv1.DaemonSet)
			if !ok || ds.Name != w.Name {
				return
			}
			mu.Lock()
			seen = true
			mu.Unlock()
			if ds.DeletionTimestamp != nil {
				mark("deletion timestamp")
			}
		},
		UpdateFunc: func(_, obj any) {
			if ds, ok := obj.(*appsv1.DaemonSet); ok && ds.Name == w.Name && ds.DeletionTimestamp != nil {
				mark("deletion timestamp")
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ds, ok := obj.(*appsv1.DaemonSet); ok && ds.Name == w.Name {
				mark("deleted")
			}
		},
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watch DaemonSet %s/%s: %w", w.Namespace, w.Name, ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	if seen {
		klog.InfoS("Watching the agent's DaemonSet: once it is deleted (helm uninstall), host files go when the agent stops, if no pod holds the node's cards",
			"daemonSet", klog.KRef(w.Namespace, w.Name))
	}
	if !seen {
		// Not (or no longer) there: an agent run by hand with the wrong name, or one
		// started while the chart is being removed. Say so; never remove on a guess.
		klog.InfoS("The agent's DaemonSet is not in the API server; host files are kept when the agent stops",
			"daemonSet", klog.KRef(w.Namespace, w.Name))
	}
	return nil
}

// Gone reports whether the DaemonSet's deletion was seen, waiting up to wait for it: the
// kubelet may stop the agent a moment before the watch event arrives.
func (w *Watch) Gone(wait time.Duration) bool {
	w.init()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.gone:
		return true
	case <-t.C:
		return false
	}
}

// Lister is the kubelet's PodResources List.
type Lister interface {
	List(ctx context.Context) ([]*podresourcesv1.PodResources, error)
}

// Files are what the agent and its init container installed on the host. Both
// directories are the DaemonSet's hostPath mounts: in the agent's container they are
// mount points, which cannot be removed from inside, so they stay behind empty.
type Files struct {
	// HookLibrary is removed, then its directory if that is left empty and can go. Where
	// the directory is read-only (the chart's agent), it is left, without an error, to the
	// chart's hook-library-cleanup container.
	HookLibrary string
	StateDir    string // emptied (ld.so.preload, per-container directories), then removed if it can go
	CDISpec     string // the hook library's CDI spec the agent wrote (cardHandoff cdi or both); "" for none
}

// Holders lists the pods (namespace/name) the kubelet reports holding devices of resource.
func Holders(pods []*podresourcesv1.PodResources, resource string) []string {
	var out []string
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			if holds(c, resource) {
				out = append(out, p.GetNamespace()+"/"+p.GetName())
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func holds(c *podresourcesv1.ContainerResources, resource string) bool {
	for _, d := range c.GetDevices() {
		if d.GetResourceName() == resource && len(d.GetDeviceIds()) > 0 {
			return true
		}
	}
	return false
}

// removeFile is os.Remove; tests replace it.
var removeFile = os.Remove

// ErrInUse is returned when pods still hold the node's vGPU slots.
var ErrInUse = errors.New("host files kept: pods on this node still hold vGPU slots")

// Remove removes the files unless the kubelet reports a pod holding devices of resource
// (or cannot be asked: then nothing is removed either).
func Remove(ctx context.Context, kubelet Lister, resource string, f Files) error {
	pods, err := kubelet.List(ctx)
	if err != nil {
		return fmt.Errorf("host files kept: cannot ask the kubelet which pods hold vGPU slots: %w", err)
	}
	if held := Holders(pods, resource); len(held) > 0 {
		return fmt.Errorf("%w: %v", ErrInUse, held)
	}
	var errs []error
	if f.HookLibrary != "" {
		switch err := removeFile(f.HookLibrary); {
		case err == nil || errors.Is(err, os.ErrNotExist):
			// Only if empty: the directory may hold what someone else put there.
			if err := removeFile(filepath.Dir(f.HookLibrary)); err != nil && !errors.Is(err, os.ErrNotExist) {
				klog.V(2).InfoS("Hook library directory kept", "dir", filepath.Dir(f.HookLibrary), "reason", err)
			}
		case errors.Is(err, syscall.EROFS):
			// The chart mounts the hook library's directory read-only in the agent (only its
			// init container and its hook-library-cleanup container write there); that
			// container removes the library once it sees the state directory emptied, below.
			// Expected: not an error. The directory is the hostPath mount and stays anyway.
			klog.V(2).InfoS("Hook library left to the chart's cleanup step: its directory is read-only in the agent",
				"hookLibrary", f.HookLibrary)
		default:
			errs = append(errs, err)
		}
	}
	if f.CDISpec != "" {
		if err := removeFile(f.CDISpec); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if f.StateDir != "" {
		entries, err := os.ReadDir(f.StateDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		// Container directories may sit on their own tmpfs: unmount them first (RemoveAll
		// would stop at the busy mount point).
		store := &records.Store{Root: f.StateDir}
		pods, _ := os.ReadDir(filepath.Join(f.StateDir, "pods"))
		for _, p := range pods {
			if err := store.RemovePod(p.Name()); err != nil {
				errs = append(errs, err)
			}
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(f.StateDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
		if err := removeFile(f.StateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			klog.V(2).InfoS("State directory kept empty", "dir", f.StateDir, "reason", err)
		}
	}
	return errors.Join(errs...)
}
