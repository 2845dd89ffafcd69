package vgpu

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
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

// decoders memoise the annotation codecs for one scheduler process (its Scheduler
// owns them). A nil *decoders decodes every time, as the CLI does.
type decoders struct {
	inventories   decodeCache[*api.NodeInventory]
	assignments   decodeCache[*api.PodAssignment]
	volcanoCards  decodeCache[[][]api.CardAssignment]
	registrations decodeCache[*api.NodeInventory]
}

// cached decodes s through c, or directly when the decoders are nil.
func cached[T any](d *decoders, c func(*decoders) *decodeCache[T], s string, decode func(string) (T, error)) (T, error) {
	if d == nil {
		return decode(s)
	}
	return c(d).get(s, decode)
}

// NodeInventory reads a node's cards as the plugin does: Tessera's own inventory
// first (refused when its heartbeat is older than heartbeatTimeout), then the HAMi
// volcano device plugin's registration. It returns nil, nil for a node without
// vGPU cards, and an error a user can act on when the annotations are unusable.
// The CLI's explain and nodes commands call it so that they see what the scheduler sees.
func NodeInventory(node *corev1.Node, now time.Time, heartbeatTimeout time.Duration) (*api.NodeInventory, error) {
	return (*decoders)(nil).nodeInventory(node, now, heartbeatTimeout)
}

func (d *decoders) nodeInventory(node *corev1.Node, now time.Time, heartbeatTimeout time.Duration) (*api.NodeInventory, error) {
	if s, ok := node.Annotations[api.AnnotationInventory]; ok {
		inv, err := cached(d, func(d *decoders) *decodeCache[*api.NodeInventory] { return &d.inventories }, s, api.DecodeInventory)
		if err != nil {
			return nil, err
		}
		if hb, ok := node.Annotations[api.AnnotationHeartbeat]; ok && heartbeatTimeout > 0 {
			t, err := time.Parse(time.RFC3339, hb)
			if err != nil {
				return nil, fmt.Errorf("%w: annotation %s: %q is not an RFC 3339 time", api.ErrInvalid, api.AnnotationHeartbeat, hb)
			}
			if age := now.Sub(t); age > heartbeatTimeout {
				return nil, fmt.Errorf("node agent heartbeat is %s old (limit %s)", age.Round(time.Second), heartbeatTimeout)
			}
		}
		return inv, nil
	}
	if s, ok := node.Annotations[api.VolcanoNodeRegister]; ok {
		return cached(d, func(d *decoders) *decodeCache[*api.NodeInventory] { return &d.registrations }, s, func(s string) (*api.NodeInventory, error) {
			cards, err := api.DecodeVolcanoNodeRegister(s)
			if err != nil {
				return nil, err
			}
			return api.InventoryFromVolcano(cards), nil
		})
	}
	return nil, nil
}

// PodCards reads the cards a placed pod holds and its QoS class: Tessera's
// annotation, then Volcano's, whose pods take the class of their tessera.io/qos
// annotation (the default when absent or unreadable: the pod is placed already) and
// whose positional entries are named after the pod's vGPU containers in spec order.
// ok is false when the pod carries neither.
func PodCards(pod *corev1.Pod) (cs []api.ContainerAssignment, qos api.QoSClass, ok bool, err error) {
	return (*decoders)(nil).podCards(pod)
}

func (d *decoders) podCards(pod *corev1.Pod) (cs []api.ContainerAssignment, qos api.QoSClass, ok bool, err error) {
	if s, found := pod.Annotations[api.AnnotationAssignment]; found {
		a, err := d.assignment(s)
		if err != nil {
			return nil, "", true, err
		}
		return a.Containers, a.QoS, true, nil
	}
	qos, err = api.ParseQoSClass(pod.Annotations[api.AnnotationQoS])
	if err != nil {
		qos, err = api.DefaultQoS, nil
	}
	if s, found := pod.Annotations[api.VolcanoAssignedIDs]; found {
		per, err := cached(d, func(d *decoders) *decodeCache[[][]api.CardAssignment] { return &d.volcanoCards }, s, api.DecodeVolcanoPodDevices)
		if err != nil {
			return nil, "", true, err
		}
		names := vgpuContainerNames(pod)
		for i, cards := range per {
			name := fmt.Sprintf("#%d", i)
			if i < len(names) {
				name = names[i]
			}
			cs = append(cs, api.ContainerAssignment{Name: name, Cards: cards})
		}
		return cs, qos, true, nil
	}
	return nil, "", false, nil
}

func (d *decoders) assignment(s string) (*api.PodAssignment, error) {
	return cached(d, func(d *decoders) *decodeCache[*api.PodAssignment] { return &d.assignments }, s, api.DecodeAssignment)
}

// vgpuContainerNames lists the containers that request Volcano's vGPU resources, in
// spec order: the positions of Volcano's per-container grammar.
func vgpuContainerNames(pod *corev1.Pod) []string {
	names := api.DefaultResourceNames()
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
