package api

import (
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// decodeCache keeps decoded values per annotation string: nodes and running pods
// change rarely, while sessions run every second over all of them. Each entry
// remembers the last sweep period it was read in, and a sweep (once per scheduling
// session) drops the entries the ending period did not read. What a session reads is
// therefore kept whatever its size, and a cluster of any size decodes each annotation
// once, not once per session. Without sweeps the cache is emptied at maxEntries.
type decodeCache[T any] struct {
	mu     sync.Mutex
	m      map[string]*decoded[T]
	period uint64
}

// maxEntries bounds the cache when nobody sweeps (a caller outside the scheduler); a
// scheduler sweeps every session and keeps exactly the last session's reads.
const maxEntries = 1 << 19

type decoded[T any] struct {
	v    T
	err  error
	read uint64 // the sweep period of the last read
}

func (c *decodeCache[T]) get(s string, decode func(string) (T, error)) (T, error) {
	c.mu.Lock()
	if d, ok := c.m[s]; ok {
		d.read = c.period
		c.mu.Unlock()
		return d.v, d.err
	}
	c.mu.Unlock()
	v, err := decode(s)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxEntries {
		c.m = make(map[string]*decoded[T])
	}
	c.m[s] = &decoded[T]{v: v, err: err, read: c.period}
	c.mu.Unlock()
	return v, err
}

// sweep drops what was not read since the previous sweep.
func (c *decodeCache[T]) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, d := range c.m {
		if d.read != c.period {
			delete(c.m, s)
		}
	}
	c.period++
}

// Decoders read the contract off Nodes and Pods, memoising each annotation codec: a
// scheduler reads every node and running pod every session, and they change rarely.
// One scheduler process owns one Decoders and calls Sweep once per session; a nil
// *Decoders decodes every time, as the CLI does.
type Decoders struct {
	inventories decodeCache[*NodeInventory]
	reserves    decodeCache[*NodeContextReserve]
	cordons     decodeCache[*NodeCordons]
	// withReserves holds inventories merged with their reserves and cordons, keyed by
	// the three annotations: one copy per node and value, not one per session.
	withReserves  decodeCache[*NodeInventory]
	assignments   decodeCache[*PodAssignment]
	volcanoCards  decodeCache[[][]CardAssignment]
	registrations decodeCache[*NodeInventory]
	// badReserves holds, per node, the malformed reserve annotation already logged:
	// the scheduler reads every node every session, and says so once.
	badReserves decodeCache[struct{}]
	// badCordons does the same for a cordon annotation the scheduler cannot read.
	badCordons decodeCache[struct{}]
	// migs holds decoded AnnotationMIGInstances values; badMIGs the malformed ones
	// already logged, per node.
	migs    decodeCache[*NodeMIGInstances]
	badMIGs decodeCache[struct{}]
}

// Sweep forgets every annotation not read since the previous Sweep (pods gone, nodes
// rewritten); call it once per scheduling session.
func (d *Decoders) Sweep() {
	if d == nil {
		return
	}
	d.inventories.sweep()
	d.reserves.sweep()
	d.withReserves.sweep()
	d.badReserves.sweep()
	d.cordons.sweep()
	d.badCordons.sweep()
	d.migs.sweep()
	d.badMIGs.sweep()
	d.assignments.sweep()
	d.volcanoCards.sweep()
	d.registrations.sweep()
}

// cached decodes s through c, or directly when the decoders are nil.
func cached[T any](d *Decoders, c func(*Decoders) *decodeCache[T], s string, decode func(string) (T, error)) (T, error) {
	if d == nil {
		return decode(s)
	}
	return c(d).get(s, decode)
}

// ReadNodeInventory reads a node's cards as the scheduler does: Tessera's own
// inventory first (refused when its heartbeat is older than heartbeatTimeout), with
// each card's context reserve from AnnotationContextReserve, then the HAMi volcano
// device plugin's registration; either with each card's cordon from
// AnnotationCordonedCards. Tessera's inventory also gets each MIG-mode card's
// instances from AnnotationMIGInstances (MIGLayoutError says why a card in MIG mode
// has none). It returns nil, nil for a node without vGPU cards,
// and an error a user can act on when the annotations are unusable. The CLI's explain
// and nodes commands call it so that they see what the scheduler sees.
func ReadNodeInventory(node *corev1.Node, now time.Time, heartbeatTimeout time.Duration) (*NodeInventory, error) {
	return (*Decoders)(nil).NodeInventory(node, now, heartbeatTimeout)
}

// NodeInventory is ReadNodeInventory through the memo.
func (d *Decoders) NodeInventory(node *corev1.Node, now time.Time, heartbeatTimeout time.Duration) (*NodeInventory, error) {
	if s, ok := node.Annotations[AnnotationInventory]; ok {
		inv, err := cached(d, func(d *Decoders) *decodeCache[*NodeInventory] { return &d.inventories }, s, DecodeInventory)
		if err != nil {
			return nil, err
		}
		if hb, ok := node.Annotations[AnnotationHeartbeat]; ok && heartbeatTimeout > 0 {
			t, err := time.Parse(time.RFC3339, hb)
			if err != nil {
				return nil, fmt.Errorf("%w: annotation %s: %q is not an RFC 3339 time", ErrInvalid, AnnotationHeartbeat, hb)
			}
			if age := now.Sub(t); age > heartbeatTimeout {
				return nil, fmt.Errorf("node agent heartbeat is %s old (limit %s)", age.Round(time.Second), heartbeatTimeout)
			}
		}
		cordons, err := d.cordonsOf(node)
		if err != nil {
			return nil, err
		}
		r := d.contextReserve(node)
		mig := d.migInstances(node)
		if r == nil && cordons == nil && mig == nil {
			return inv, nil
		}
		key := s + "\x00" + node.Annotations[AnnotationContextReserve] + "\x00" + node.Annotations[AnnotationCordonedCards] +
			"\x00" + node.Annotations[AnnotationMIGInstances]
		return cached(d, func(d *Decoders) *decodeCache[*NodeInventory] { return &d.withReserves }, key,
			func(string) (*NodeInventory, error) {
				return inv.WithContextReserve(r).WithCordons(cordons).WithMIGInstances(mig), nil
			})
	}
	if s, ok := node.Annotations[VolcanoNodeRegister]; ok {
		inv, err := cached(d, func(d *Decoders) *decodeCache[*NodeInventory] { return &d.registrations }, s, func(s string) (*NodeInventory, error) {
			cards, err := DecodeVolcanoNodeRegister(s)
			if err != nil {
				return nil, err
			}
			return InventoryFromVolcano(cards), nil
		})
		if err != nil {
			return nil, err
		}
		// An administrator cordons the cards of a node still on HAMi's agent alike.
		cordons, err := d.cordonsOf(node)
		if err != nil || cordons == nil {
			return inv, err
		}
		return cached(d, func(d *Decoders) *decodeCache[*NodeInventory] { return &d.withReserves },
			"hami\x00"+s+"\x00"+node.Annotations[AnnotationCordonedCards], func(string) (*NodeInventory, error) { return inv.WithCordons(cordons), nil })
	}
	return nil, nil
}

// contextReserve reads the node's AnnotationContextReserve; nil when it is absent or
// malformed. A malformed one is logged (once per node and value, through the memo) and
// otherwise ignored: the reserve only keeps containers off cards, so a bad one must not
// make the node unusable, and without it placement is what it was before reserves.
func (d *Decoders) contextReserve(node *corev1.Node) *NodeContextReserve {
	s, ok := node.Annotations[AnnotationContextReserve]
	if !ok {
		return nil
	}
	r, err := cached(d, func(d *Decoders) *decodeCache[*NodeContextReserve] { return &d.reserves }, s, DecodeContextReserve)
	if err == nil {
		return r
	}
	_, _ = cached(d, func(d *Decoders) *decodeCache[struct{}] { return &d.badReserves }, node.Name+"\n"+s, func(string) (struct{}, error) {
		klog.ErrorS(err, "Node's CUDA context reserve annotation is malformed; placing on its cards as if they had none",
			"node", node.Name, "annotation", AnnotationContextReserve)
		return struct{}{}, nil
	})
	return nil
}

// migInstances reads the node's AnnotationMIGInstances; nil when it is absent or
// malformed. A malformed one is logged (once per node and value) and leaves every
// card in MIG mode without a layout: no MIG instance of the node is handed out until
// it is fixed (MIGLayoutError gives the reason placement reports), while its other
// cards take tasks as before.
func (d *Decoders) migInstances(node *corev1.Node) *NodeMIGInstances {
	s, ok := node.Annotations[AnnotationMIGInstances]
	if !ok {
		return nil
	}
	m, err := cached(d, func(d *Decoders) *decodeCache[*NodeMIGInstances] { return &d.migs }, s, DecodeMIGInstances)
	if err == nil {
		return m
	}
	if d != nil {
		_, _ = d.badMIGs.get(node.Name+"\n"+s, func(string) (struct{}, error) {
			klog.ErrorS(err, "Node's MIG layout annotation is unreadable; none of its MIG instances takes a task until it is fixed",
				"node", node.Name, "annotation", AnnotationMIGInstances)
			return struct{}{}, nil
		})
	}
	return nil
}

// MIGLayoutError says why the node's cards in MIG mode have no layout to place on:
// AnnotationMIGInstances is absent, or this build cannot read it (the decoder's error,
// which names the annotation). nil when the annotation reads.
func MIGLayoutError(node *corev1.Node) error {
	s, ok := node.Annotations[AnnotationMIGInstances]
	if !ok {
		return fmt.Errorf("annotation %s is absent: the node agent has not published the MIG layout", AnnotationMIGInstances)
	}
	_, err := DecodeMIGInstances(s)
	return err
}

// cordonsOf reads the node's AnnotationCordonedCards; nil when it is absent. One this
// build cannot read (malformed, or a newer version) makes the whole node refuse new
// vGPU tasks with the decoder's error as the reason: a cordon keeps work off a card
// that may be failing, and which card was meant cannot be told, so no card of the node
// is trusted until the annotation is fixed (docs/contract.md). The scheduler also logs
// it, once per node and value.
func (d *Decoders) cordonsOf(node *corev1.Node) (*NodeCordons, error) {
	s, ok := node.Annotations[AnnotationCordonedCards]
	if !ok {
		return nil, nil
	}
	c, err := cached(d, func(d *Decoders) *decodeCache[*NodeCordons] { return &d.cordons }, s, DecodeCordons)
	if err == nil {
		return c, nil
	}
	if d != nil {
		_, _ = d.badCordons.get(node.Name+"\n"+s, func(string) (struct{}, error) {
			klog.ErrorS(err, "Node's card cordon annotation is unreadable; none of its cards takes a new vGPU task until it is fixed or removed",
				"node", node.Name, "annotation", AnnotationCordonedCards)
			return struct{}{}, nil
		})
	}
	return nil, fmt.Errorf("%w; no card of the node takes a new vGPU task until it is fixed or removed", err)
}

// ErrNoAssignment is wrapped when a pod carries neither Tessera's assignment nor
// Volcano's vgpu-ids-new.
var ErrNoAssignment = errors.New("no card assignment")

// ReadPodAssignment is the one reader of a placed pod's cards, used by the scheduler,
// the node agent, the webhook and the CLI alike: Tessera's annotation, or else
// Volcano's vgpu-ids-new read positionally over the pod's vGPU containers (by the
// configured resource names) in spec order, with the class of the pod's tessera.io/qos
// annotation and the node of volcano.sh/vgpu-node (else the pod's own). It wraps
// ErrNoAssignment when the pod carries neither. It decodes; it does not judge whether
// the scheduler wrote the assignment (the agent's trust checks do).
func ReadPodAssignment(pod *corev1.Pod, names ResourceNames) (*PodAssignment, error) {
	return (*Decoders)(nil).PodAssignment(pod, names)
}

// PodAssignment is ReadPodAssignment through the memo.
func (d *Decoders) PodAssignment(pod *corev1.Pod, names ResourceNames) (*PodAssignment, error) {
	if s, found := pod.Annotations[AnnotationAssignment]; found {
		return d.Assignment(s)
	}
	s, found := pod.Annotations[VolcanoAssignedIDs]
	if !found {
		return nil, fmt.Errorf("%w: the pod has neither %s nor %s", ErrNoAssignment, AnnotationAssignment, VolcanoAssignedIDs)
	}
	per, err := cached(d, func(d *Decoders) *decodeCache[[][]CardAssignment] { return &d.volcanoCards }, s, DecodeVolcanoPodDevices)
	if err != nil {
		return nil, err
	}
	reqs, err := names.ContainerRequests(pod)
	if err != nil {
		return nil, err
	}
	if len(per) != len(reqs) {
		return nil, fmt.Errorf("%w: %s: %d container entries for %d vGPU containers", ErrInvalid, VolcanoAssignedIDs, len(per), len(reqs))
	}
	qos, err := ParseQoSClass(pod.Annotations[AnnotationQoS])
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationQoS, err)
	}
	node := pod.Annotations[VolcanoAssignedNode]
	if node == "" {
		node = pod.Spec.NodeName
	}
	a := &PodAssignment{Version: AssignmentVersion, Node: node, QoS: qos}
	for i, r := range reqs {
		if len(per[i]) != r.Cards {
			return nil, fmt.Errorf("%w: %s: container %q has %d cards, requests %d", ErrInvalid, VolcanoAssignedIDs, r.Name, len(per[i]), r.Cards)
		}
		a.Containers = append(a.Containers, ContainerAssignment{Name: r.Name, Cards: per[i]})
	}
	return a, nil
}

// PodCards is PodAssignment as the ledger wants it: ok is false when the pod carries
// no assignment at all.
func (d *Decoders) PodCards(pod *corev1.Pod, names ResourceNames) (cs []ContainerAssignment, qos QoSClass, ok bool, err error) {
	a, err := d.PodAssignment(pod, names)
	if errors.Is(err, ErrNoAssignment) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", true, err
	}
	return a.Containers, a.QoS, true, nil
}

// Assignment decodes a Tessera pod assignment annotation through the memo.
func (d *Decoders) Assignment(s string) (*PodAssignment, error) {
	return cached(d, func(d *Decoders) *decodeCache[*PodAssignment] { return &d.assignments }, s, DecodeAssignment)
}
