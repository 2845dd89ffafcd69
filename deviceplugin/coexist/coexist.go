// Package coexist keeps the node agent from serving cards that another device plugin
// (NVIDIA's, usually deployed by the GPU Operator) already hands out on the same node:
// both would advertise the same physical cards to the kubelet, and a card could go to
// a whole-card pod of one and to shared pods of the other at once.
//
// The other plugin is seen the way the kubelet exposes it: its extended resources in
// the Node's capacity. Unless told to share, the agent waits (publishing nothing and
// registering nothing with the kubelet) until they are gone, and stops if they appear
// while it serves; each change is logged and posted as a Node event.
package coexist

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// ErrConflict is returned by Watch when another plugin's GPU resources appear.
var ErrConflict = errors.New("another device plugin advertises this node's GPUs")

// Event reasons posted on the Node.
const (
	ReasonConflict = "TesseraGPUPluginConflict"
	ReasonCleared  = "TesseraGPUPluginConflictCleared"
)

// Resources returns the GPU resources another device plugin advertises in the
// node's capacity, sorted, as "name=count": NVIDIA's whole cards (nvidia.com/gpu),
// its MIG slices (nvidia.com/mig-*) and its time-sliced or renamed shared GPUs
// (nvidia.com/gpu.shared). A resource with zero capacity (a plugin that left) is not
// counted.
func Resources(node *corev1.Node) []string {
	var out []string
	for name, q := range node.Status.Capacity {
		n := string(name)
		if n != "nvidia.com/gpu" && !strings.HasPrefix(n, "nvidia.com/gpu.") && !strings.HasPrefix(n, "nvidia.com/mig-") {
			continue
		}
		if q.Value() > 0 {
			out = append(out, fmt.Sprintf("%s=%d", n, q.Value()))
		}
	}
	sort.Strings(out)
	return out
}

// Guard checks the agent's node for other GPU device plugins.
type Guard struct {
	Client kubernetes.Interface
	Node   string
	// Share serves the cards even when another plugin advertises them (the operator
	// has split the cards between the two some other way).
	Share bool
	// Interval is how often the node is read again (30 s when zero).
	Interval time.Duration
	// Report, when set, is told the other plugins' resources each time they change
	// (none: the node is clear), e.g. for the agent's readiness.
	Report func(resources []string)

	last []string // the conflict last reported, to report changes only

	mu       sync.Mutex
	seen     *corev1.Node // the Node as another writer last read it (Observe)
	seenTime time.Time
	now      func() time.Time
}

// Observe hands the guard a fresh copy of the agent's Node that another part read
// anyway (the inventory publisher's heartbeat PATCH returns it): a check within one
// interval of it reads no Node of its own, so the guard costs the API server nothing
// while the heartbeat is at least as frequent as its interval.
func (g *Guard) Observe(node *corev1.Node) {
	if node == nil || node.Name != g.Node {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen, g.seenTime = node, g.clock()
}

func (g *Guard) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// node is the freshest copy of the Node: an observed one younger than the interval,
// else a GET.
func (g *Guard) node(ctx context.Context) (*corev1.Node, error) {
	g.mu.Lock()
	seen, at := g.seen, g.seenTime
	g.mu.Unlock()
	if seen != nil && g.clock().Sub(at) < g.interval() {
		return seen, nil
	}
	node, err := g.Client.CoreV1().Nodes().Get(ctx, g.Node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", g.Node, err)
	}
	return node, nil
}

// WaitClear returns once no other plugin advertises GPUs on the node (at once when
// Share is set), or with ctx's error. While it waits, the agent serves nothing. A node
// it cannot read (not registered yet: the agent started before its kubelet registered
// the Node, or the API server is away) is read again after 1 s, doubling up to the
// interval, so that a new node is served as soon as it exists.
func (g *Guard) WaitClear(ctx context.Context) error {
	retry := time.Second
	for {
		res, err := g.check(ctx)
		wait := g.interval()
		if err != nil {
			klog.ErrorS(err, "Cannot read the node to look for other GPU device plugins; retrying", "node", g.Node, "in", min(retry, wait))
			wait, retry = min(retry, wait), retry*2
		} else if len(res) == 0 || g.Share {
			return nil
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// Watch returns ErrConflict (wrapped, naming the resources) when another plugin's GPU
// resources appear on the node while the agent serves, or ctx's error. With Share it
// only waits for ctx.
func (g *Guard) Watch(ctx context.Context) error {
	for {
		if err := sleep(ctx, g.interval()); err != nil {
			return err
		}
		res, err := g.check(ctx)
		if err != nil {
			klog.V(2).InfoS("Cannot read the node to look for other GPU device plugins", "node", g.Node, "err", err)
			continue
		}
		if len(res) > 0 && !g.Share {
			return fmt.Errorf("%w: %s", ErrConflict, strings.Join(res, ", "))
		}
	}
}

// check reads the node and reports a change of conflict in the log and as an event.
func (g *Guard) check(ctx context.Context) ([]string, error) {
	node, err := g.node(ctx)
	if err != nil {
		return nil, err
	}
	res := Resources(node)
	if strings.Join(res, ",") == strings.Join(g.last, ",") {
		return res, nil
	}
	g.last = res
	if g.Report != nil {
		g.Report(res)
	}
	switch {
	case len(res) == 0:
		klog.InfoS("No other GPU device plugin on the node", "node", g.Node)
		g.event(ctx, node, corev1.EventTypeNormal, ReasonCleared, "no other device plugin advertises this node's GPUs; the Tessera node agent serves them")
	case g.Share:
		klog.InfoS("Another device plugin advertises this node's GPUs; serving them too, as configured (otherGPUPlugins: share)",
			"node", g.Node, "resources", res)
	default:
		msg := fmt.Sprintf("the Tessera node agent does not serve this node's GPUs: another device plugin advertises %s. "+
			"Leave the node to one of them (GPU Operator: label the node nvidia.com/gpu.deploy.device-plugin=false), "+
			"or set the agent's otherGPUPlugins: share if the cards are split between them some other way", strings.Join(res, ", "))
		klog.ErrorS(ErrConflict, "Refusing to serve the node's GPUs", "node", g.Node, "resources", res)
		g.event(ctx, node, corev1.EventTypeWarning, ReasonConflict, msg)
	}
	return res, nil
}

// event posts a Node event (as kubectl describe node shows them); failing to post is
// logged, never fatal.
func (g *Guard) event(ctx context.Context, node *corev1.Node, kind, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		// Named as client-go's recorder names events: the object, then the time in hex.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node.Name, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID,
			APIVersion: "v1"},
		Reason: reason, Message: msg, Type: kind,
		Source:         corev1.EventSource{Component: "tessera-node-agent", Host: node.Name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "tessera.io/node-agent", ReportingInstance: node.Name,
	}
	if _, err := g.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.ErrorS(err, "Cannot post a Node event", "node", node.Name, "reason", reason)
	}
}

func (g *Guard) interval() time.Duration {
	if g.Interval <= 0 {
		return 30 * time.Second
	}
	return g.Interval
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
