package api

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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

func (c *decodeCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Decoders read the contract off Nodes and Pods, memoising each annotation codec: a
// scheduler reads every node and running pod every session, and they change rarely.
// One scheduler process owns one Decoders and calls Sweep once per session; a nil
// *Decoders decodes every time, as the CLI does.
type Decoders struct {
	inventories   decodeCache[*NodeInventory]
	assignments   decodeCache[*PodAssignment]
	volcanoCards  decodeCache[[][]CardAssignment]
	registrations decodeCache[*NodeInventory]
}

// Sweep forgets every annotation not read since the previous Sweep (pods gone, nodes
// rewritten); call it once per scheduling session.
func (d *Decoders) Sweep() {
	if d == nil {
		return
	}
	d.inventories.sweep()
	d.assignments.sweep()
	d.volcanoCards.sweep()
	d.registrations.sweep()
}

// Cached is how many decoded annotations the memo holds.
func (d *Decoders) Cached() int {
	if d == nil {
		return 0
	}
	return d.inventories.len() + d.assignments.len() + d.volcanoCards.len() + d.registrations.len()
}

// cached decodes s through c, or directly when the decoders are nil.
func cached[T any](d *Decoders, c func(*Decoders) *decodeCache[T], s string, decode func(string) (T, error)) (T, error) {
	if d == nil {
		return decode(s)
	}
	return c(d).get(s, decode)
}

// ReadNodeInventory reads a node's cards as the scheduler does: Tessera's own
// inventory first (refused when its heartbeat is older than heartbeatTimeout), then
// the HAMi volcano device plugin's registration. It returns nil, nil for a node
// without vGPU cards, and an error a user can act on when the annotations are
// unusable. The CLI's explain and nodes commands call it so that they see what the
// scheduler sees.
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
		return inv, nil
	}
	if s, ok := node.Annotations[VolcanoNodeRegister]; ok {
		return cached(d, func(d *Decoders) *decodeCache[*NodeInventory] { return &d.registrations }, s, func(s string) (*NodeInventory, error) {
			cards, err := DecodeVolcanoNodeRegister(s)
			if err != nil {
				return nil, err
			}
			return InventoryFromVolcano(cards), nil
		})
	}
	return nil, nil
}

// ReadPodCards reads the cards a placed pod holds and its QoS class: Tessera's
// annotation, then Volcano's, whose pods take the class of their tessera.io/qos
// annotation (the default when absent or unreadable: the pod is placed already) and
// whose positional entries are named after the pod's vGPU containers in spec order.
// ok is false when the pod carries neither.
func ReadPodCards(pod *corev1.Pod) (cs []ContainerAssignment, qos QoSClass, ok bool, err error) {
	return (*Decoders)(nil).PodCards(pod)
}

// PodCards is ReadPodCards through the memo.
func (d *Decoders) PodCards(pod *corev1.Pod) (cs []ContainerAssignment, qos QoSClass, ok bool, err error) {
	if s, found := pod.Annotations[AnnotationAssignment]; found {
		a, err := d.Assignment(s)
		if err != nil {
			return nil, "", true, err
		}
		return a.Containers, a.QoS, true, nil
	}
	qos, err = ParseQoSClass(pod.Annotations[AnnotationQoS])
	if err != nil {
		qos, err = DefaultQoS, nil
	}
	if s, found := pod.Annotations[VolcanoAssignedIDs]; found {
		per, err := cached(d, func(d *Decoders) *decodeCache[[][]CardAssignment] { return &d.volcanoCards }, s, DecodeVolcanoPodDevices)
		if err != nil {
			return nil, "", true, err
		}
		names := vgpuContainerNames(pod)
		for i, cards := range per {
			name := fmt.Sprintf("#%d", i)
			if i < len(names) {
				name = names[i]
			}
			cs = append(cs, ContainerAssignment{Name: name, Cards: cards})
		}
		return cs, qos, true, nil
	}
	return nil, "", false, nil
}

// Assignment decodes a Tessera pod assignment annotation through the memo.
func (d *Decoders) Assignment(s string) (*PodAssignment, error) {
	return cached(d, func(d *Decoders) *decodeCache[*PodAssignment] { return &d.assignments }, s, DecodeAssignment)
}

// vgpuContainerNames lists the containers that request Volcano's vGPU resources, in
// spec order: the positions of Volcano's per-container grammar.
func vgpuContainerNames(pod *corev1.Pod) []string {
	names := DefaultResourceNames()
	var out []string
	for _, c := range pod.Spec.Containers {
		for _, r := range []corev1.ResourceName{names.Number, names.Memory, names.MemoryPercentage, names.Cores} {
			if _, ok := c.Resources.Limits[r]; ok {
				out = append(out, c.Name)
				break
			}
		}
	}
	return out
}
