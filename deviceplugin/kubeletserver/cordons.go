package kubeletserver

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// ErrCordoned is wrapped when the slots the kubelet asks for could only come from
// cards an administrator cordoned (api.AnnotationCordonedCards), or when the server
// cannot tell which cards are cordoned.
var ErrCordoned = errors.New("cordoned cards")

// cordonView is the node's card cordons as the agent last read them. The scheduler
// keeps new vGPU tasks off a cordoned card; the server applies the same cordons where
// it chooses cards itself, in GetPreferredAllocation's fallback for a pod with no
// assignment to follow.
type cordonView struct {
	mu sync.Mutex
	// read is set once a Node has been observed (from the start without
	// Options.AwaitCordons); until then no card is known to be uncordoned.
	read    bool
	present bool   // whether the annotation was on the Node
	value   string // the annotation as last read
	cordons *api.NodeCordons
	// bad is why value does not decode; every card then counts as cordoned, as the
	// scheduler reads such a node.
	bad error
}

// ObserveNode reads the card cordons from a copy of the agent's Node that another
// part of the agent read anyway (the inventory publisher's write returns it), so the
// cordons cost the API server nothing more. A cordon takes effect here with the next
// such copy, within one heartbeat. A value that does not decode counts every card as
// cordoned and is logged once.
func (s *Server) ObserveNode(node *corev1.Node) {
	if node == nil {
		return
	}
	v, present := node.Annotations[api.AnnotationCordonedCards]
	c := &s.cordons
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read && present == c.present && v == c.value {
		return
	}
	c.read, c.present, c.value = true, present, v
	c.cordons, c.bad = nil, nil
	if !present {
		klog.InfoS("No card of the node is cordoned", "node", node.Name)
		return
	}
	decoded, err := api.DecodeCordons(v)
	if err != nil {
		c.bad = err
		klog.ErrorS(err, "The node's card cordons do not decode; every card counts as cordoned for pods without an assignment until the annotation is fixed or removed",
			"node", node.Name, "annotation", api.AnnotationCordonedCards)
		return
	}
	c.cordons = decoded
	uuids := make([]string, 0, len(decoded.Cards))
	for u := range decoded.Cards {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	klog.InfoS("Read the node's card cordons", "node", node.Name, "cordoned", uuids)
}

// apply returns inv with each card's cordon set, or an error saying why every card
// counts as cordoned.
func (c *cordonView) apply(inv *api.NodeInventory) (*api.NodeInventory, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.read:
		return nil, fmt.Errorf("%w: the node's card cordons (%s) are not read yet", ErrCordoned, api.AnnotationCordonedCards)
	case c.bad != nil:
		return nil, fmt.Errorf("%w: every card counts as cordoned while the node's cordons do not decode: %w", ErrCordoned, c.bad)
	}
	return inv.WithCordons(c.cordons), nil
}
