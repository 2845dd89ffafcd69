package api

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// decodeCache keeps the last decoded value per annotation string: nodes and running
// pods change rarely, while sessions run every second over all of them.
type decodeCache[T any] struct {
	mu sync.Mutex
	m  map[string]decoded[T]
}

type decoded[T any] struct {
	v   T
	err error
}

func (c *decodeCache[T]) get(s string, decode func(string) (T, error)) (T, error) {
	c.mu.Lock()
	if d, ok := c.m[s]; ok {
		c.mu.Unlock()
		return d.v, d.err
	}
	c.mu.Unlock()
	v, err := decode(s)
	c.mu.Lock()
	if c.m == nil || len(c.m) > 20000 {
		c.m = make(map[string]decoded[T])
	}
	c.m[s] = decoded[T]{v, err}
	c.mu.Unlock()
	return v, err
}

// Decoders read the contract off Nodes and Pods, memoising each annotation codec: a
// scheduler reads every node and running pod every session, and they change rarely.
// One scheduler process owns one Decoders; a nil *Decoders decodes every time, as the
// CLI does.
type Decoders struct {
	inventories   decodeCache[*NodeInventory]
	assignments   decodeCache[*PodAssignment]
	volcanoCards  decodeCache[[][]CardAssignment]
	registrations decodeCache[*NodeInventory]
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
