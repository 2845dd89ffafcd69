// Package nodepods is the node agent's view of the pods bound to its node in the API
// server: a node-filtered informer to look them up, their card assignments read for
// this node, and the handoff state patched onto them.
package nodepods

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tessera-gpu/tessera/api"
)

// ErrNoAssignment is wrapped when a pod carries neither Tessera's assignment nor
// Volcano's vgpu-ids-new.
var ErrNoAssignment = api.ErrNoAssignment

// ErrWrongNode is wrapped when a pod's assignment names another node.
var ErrWrongNode = errors.New("assignment is for another node")

// Informer looks up the pods bound to one node, over a node-filtered shared informer.
type Informer struct {
	factory informers.SharedInformerFactory
	lister  listersv1.PodLister
	synced  cache.InformerSynced
	node    string
}

// NewInformer watches the pods bound to node; call Start before use.
func NewInformer(client kubernetes.Interface, node string) *Informer {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := f.Core().V1().Pods()
	return &Informer{factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced, node: node}
}

// Start runs the informer until ctx ends and waits for its first list.
func (p *Informer) Start(ctx context.Context) error {
	p.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.synced) {
		return fmt.Errorf("pod informer for node %s did not sync: %w", p.node, ctx.Err())
	}
	return nil
}

// Run runs the informer until ctx ends without waiting for its first list: List says
// ErrPodsNotSynced until then.
func (p *Informer) Run(ctx context.Context) { p.factory.Start(ctx.Done()) }

// Shutdown waits for the informer's goroutines once ctx has ended.
func (p *Informer) Shutdown() { p.factory.Shutdown() }

// ErrPodsNotSynced is returned by List before the informer has listed once: a caller
// then skips its work rather than judge every pod gone.
var ErrPodsNotSynced = errors.New("the node's pods are not listed yet")

// List returns the pods bound to the node, ErrPodsNotSynced before the first list.
func (p *Informer) List() ([]*corev1.Pod, error) {
	if !p.synced() {
		return nil, fmt.Errorf("node %s: %w", p.node, ErrPodsNotSynced)
	}
	pods, err := p.lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", p.node, err)
	}
	out := pods[:0:0]
	for _, pod := range pods {
		if pod.Spec.NodeName == p.node {
			out = append(out, pod)
		}
	}
	return out, nil
}

// Getter is Get waiting up to wait for a pod the informer has not seen yet (the kubelet
// may act on a pod a moment before the informer hears of its binding).
func (p *Informer) Getter(wait time.Duration) func(namespace, name string) (*corev1.Pod, bool) {
	return func(namespace, name string) (*corev1.Pod, bool) {
		deadline := time.Now().Add(wait)
		for {
			if pod, ok := p.Get(namespace, name); ok || !time.Now().Before(deadline) {
				return pod, ok
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Get returns the pod if it is bound to this node.
func (p *Informer) Get(namespace, name string) (*corev1.Pod, bool) {
	pod, err := p.lister.Pods(namespace).Get(name)
	if err != nil || pod.Spec.NodeName != p.node {
		return nil, false
	}
	return pod, true
}

// Exists reports whether a pod with this UID is bound to the node.
func (p *Informer) Exists(uid types.UID) bool {
	pods, err := p.lister.List(labels.Everything())
	if err != nil {
		return true // when in doubt, a pod is not gone
	}
	for _, pod := range pods {
		if pod.UID == uid && pod.Spec.NodeName == p.node {
			return true
		}
	}
	return false
}

// Synced reports whether the informer has listed once.
func (p *Informer) Synced() bool { return p.synced() }

// WaitFor polls until get returns true or the timeout passes; the informer may see a
// pod a little after the kubelet does.
func WaitFor(ctx context.Context, timeout, every time.Duration, get func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if get() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
}

// ReadAssignment returns the pod's card assignment for this node, through the one
// reader the scheduler and the CLI use too (api.ReadPodAssignment). It decodes and checks
// the node; whether the scheduler wrote it is Trust's question.
func ReadAssignment(pod *corev1.Pod, node string, names api.ResourceNames) (*api.PodAssignment, error) {
	a, err := api.ReadPodAssignment(pod, names)
	if err != nil {
		return nil, err
	}
	if a.Node != node {
		key := api.AnnotationAssignment
		if _, ok := pod.Annotations[key]; !ok {
			key = api.VolcanoAssignedNode
		}
		return nil, fmt.Errorf("%w: %s names node %q, this is %q", ErrWrongNode, key, a.Node, node)
	}
	return a, nil
}
