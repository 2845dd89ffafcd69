package ui

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// livePods leaves out finished pods, which hold no cards and wait for nothing.
const livePods = "status.phase!=Succeeded,status.phase!=Failed"

// clusterCache keeps the cluster's nodes, pods, Volcano queues and PodGroups current
// through informers, and calls changed after every event that may alter the page.
// It lives from newClusterCache until the context given to start ends.
type clusterCache struct {
	kube    informers.SharedInformerFactory
	volcano []dynamicinformer.DynamicSharedInformerFactory
	nodes   corelisters.NodeLister
	pods    corelisters.PodLister
	// queues and podGroups are nil where the account may not read them.
	queues, podGroups cache.GenericLister
	informers         []cache.SharedIndexInformer
}

func newClusterCache(c Clients, r *reach, args pluginargs.Args, changed func()) (*clusterCache, error) {
	cc := &clusterCache{kube: informers.NewSharedInformerFactory(c.Kube, 0)}
	nodes := cc.kube.Core().V1().Nodes()
	cc.nodes = nodes.Lister()
	pods := cc.kube.InformerFor(&corev1.Pod{}, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(client, r.podNamespace, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.FieldSelector = livePods })
	})
	cc.pods = corelisters.NewPodLister(pods.GetIndexer())
	if err := cc.watch(nodes.Informer(), everyChange(changed)); err != nil {
		return nil, fmt.Errorf("watch nodes: %w", err)
	}
	// Pods without vGPU resources change neither the cards nor the pending list.
	vgpu := func(obj any) bool {
		p, ok := obj.(*corev1.Pod)
		return !ok || args.Resources.HasVGPURequest(p)
	}
	if err := cc.watch(pods, filtered(vgpu, changed)); err != nil {
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	if r.queues {
		f := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
		q := f.ForResource(queuesResource)
		cc.volcano, cc.queues = append(cc.volcano, f), q.Lister()
		if err := cc.watch(q.Informer(), everyChange(changed)); err != nil {
			return nil, fmt.Errorf("watch Volcano queues: %w", err)
		}
	}
	if r.podGroups {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.Dynamic, 0, r.podNamespace, nil)
		g := f.ForResource(podGroupsResource)
		cc.volcano, cc.podGroups = append(cc.volcano, f), g.Lister()
		if err := cc.watch(g.Informer(), everyChange(changed)); err != nil {
			return nil, fmt.Errorf("watch Volcano PodGroups: %w", err)
		}
	}
	return cc, nil
}

// watch trims what the informer keeps and registers the handler.
func (cc *clusterCache) watch(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	if err := inf.SetTransform(dropManagedFields); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return err
	}
	cc.informers = append(cc.informers, inf)
	return nil
}

// start runs the informers until ctx ends and waits for their first lists; stop waits
// for them to finish after ctx has ended.
func (cc *clusterCache) start(ctx context.Context) error {
	cc.kube.Start(ctx.Done())
	for _, f := range cc.volcano {
		f.Start(ctx.Done())
	}
	synced := make([]cache.InformerSynced, len(cc.informers))
	for i, inf := range cc.informers {
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("the cluster caches did not sync")
	}
	return nil
}

func (cc *clusterCache) stop() {
	cc.kube.Shutdown()
	for _, f := range cc.volcano {
		f.Shutdown()
	}
}

// contents is what the cache holds now. The objects are the cache's own: read, never write.
func (cc *clusterCache) contents() (*contents, error) {
	out := &contents{}
	nodes, err := cc.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list cached nodes: %w", err)
	}
	pods, err := cc.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list cached pods: %w", err)
	}
	out.nodes, out.pods = nodes, pods
	if out.queues, err = unstructuredList(cc.queues); err != nil {
		return nil, fmt.Errorf("list cached queues: %w", err)
	}
	if out.podGroups, err = unstructuredList(cc.podGroups); err != nil {
		return nil, fmt.Errorf("list cached PodGroups: %w", err)
	}
	return out, nil
}

func unstructuredList(l cache.GenericLister) ([]*unstructured.Unstructured, error) {
	if l == nil {
		return nil, nil
	}
	objs, err := l.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out, nil
}

// dropManagedFields keeps the informers' memory to what the page reads.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func everyChange(changed func()) cache.ResourceEventHandler {
	return filtered(func(any) bool { return true }, changed)
}

// filtered calls changed for events whose old or new object passes keep; a deleted
// object seen only as a tombstone always counts.
func filtered(keep func(any) bool, changed func()) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if keep(obj) {
				changed()
			}
		},
		UpdateFunc: func(old, obj any) {
			if keep(old) || keep(obj) {
				changed()
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if keep(obj) {
				changed()
			}
		},
	}
}
