package nodepods

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// ErrExceedsRequest is wrapped when an assignment gives a container more than its
// pod spec asks for: more memory, more cores, another service class, or no memory limit.
var ErrExceedsRequest = errors.New("assignment exceeds what the container requests")

// Keys is where the agent finds the scheduler's published verification keys
// (assignkeys.Watcher, or a fixed set in tests).
type Keys interface {
	Verifier() (*api.Verifier, error)
}

// Trust decides whether the agent honours an assignment. Pod annotations are written
// by whoever may update the pod, tenants included: an assignment counts only when the
// scheduler signed it for this pod UID and node, and never beyond what the pod spec
// (immutable after creation) asks for.
type Trust struct {
	// Keys verifies signatures; nil turns signature checks off (the agent warns at start).
	Keys Keys
	// AllowUnsigned honours assignments without any signature (Volcano's deviceshare
	// writes none): for migrating from it only. A present but bad signature is refused
	// whatever this says.
	AllowUnsigned bool
	// CardMemoryMiB is a card's memory, for requests in percent or for the whole card.
	CardMemoryMiB func(uuid string) (int64, bool)
	// Verified remembers signatures that verified (nil: none are remembered). The
	// kubelet's GetPreferredAllocation and Allocate read the same pending pods one after
	// the other; an Ed25519 check costs about 50 µs.
	Verified *VerifiedMemo
}

// VerifiedMemo remembers which exact signed contents verified against which keys.
type VerifiedMemo struct {
	mu   sync.Mutex
	keys *api.Verifier
	seen map[string]struct{}
}

// memoLimit bounds the memo: a node admits a few pods at a time.
const memoLimit = 4096

func (m *VerifiedMemo) has(v *api.Verifier, k string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.seen[k]
	return ok && m.keys == v
}

func (m *VerifiedMemo) add(v *api.Verifier, k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys != v || len(m.seen) >= memoLimit {
		m.keys, m.seen = v, map[string]struct{}{}
	}
	m.seen[k] = struct{}{}
}

// RefusalReason names the kind of a refusal for metrics: a fixed set of words, never a
// value a tenant wrote.
func RefusalReason(err error) string {
	switch {
	case errors.Is(err, api.ErrUnsigned):
		return "unsigned"
	case errors.Is(err, api.ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, api.ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, ErrExceedsRequest):
		return "exceeds_request"
	case errors.Is(err, ErrWrongNode):
		return "wrong_node"
	case errors.Is(err, api.ErrNoAssignment):
		return "no_assignment"
	case errors.Is(err, api.ErrInvalid), errors.Is(err, api.ErrUnsupportedVersion):
		return "malformed"
	}
	return "other"
}

// Read returns the pod's assignment for node when the agent may honour it.
func (t *Trust) Read(pod *corev1.Pod, node string, names api.ResourceNames) (*api.PodAssignment, error) {
	a, err := ReadAssignment(pod, node, names)
	if err != nil {
		return nil, err
	}
	if err := t.verify(pod, node); err != nil {
		return nil, err
	}
	if err := t.WithinRequest(pod, a, names); err != nil {
		return nil, err
	}
	return a, nil
}

func (t *Trust) verify(pod *corev1.Pod, node string) error {
	if t.Keys == nil {
		return nil
	}
	if _, signed := pod.Annotations[api.AnnotationAssignmentSignature]; !signed && t.AllowUnsigned {
		return nil
	}
	v, err := t.Keys.Verifier()
	if err != nil {
		return err
	}
	if t.Verified == nil {
		return v.VerifyPod(pod, node)
	}
	// Everything the signature covers, and the signature: a copied signature over other
	// content is another key.
	a := pod.Annotations
	k := strings.Join([]string{a[api.AnnotationAssignmentSignature], string(pod.UID), node, a[api.AnnotationAssignment], a[api.VolcanoAssignedIDs]}, "\x00")
	if t.Verified.has(v, k) {
		return nil
	}
	if err := v.VerifyPod(pod, node); err != nil {
		return err
	}
	t.Verified.add(v, k)
	return nil
}

// WithinRequest checks each container's cards against what its spec asks: memory per
// card at most the MiB (or percent of the card) requested, or the card when neither is
// given, and never 0 (vgpu-core reads 0 as no limit); cores at most those requested and
// not 0 when some were (0 runs uncapped); the pod's own service class; exactly the
// requested number of cards, and no container without a request.
func (t *Trust) WithinRequest(pod *corev1.Pod, a *api.PodAssignment, names api.ResourceNames) error {
	reqs, err := names.ContainerRequests(pod)
	if err != nil {
		return err
	}
	qos, err := api.ParseQoSClass(pod.Annotations[api.AnnotationQoS])
	if err != nil {
		return fmt.Errorf("annotation %s: %w", api.AnnotationQoS, err)
	}
	if a.QoS != qos {
		return fmt.Errorf("%w: the assignment's class is %s, the pod asks for %s", ErrExceedsRequest, a.QoS, qos)
	}
	if len(a.Containers) != len(reqs) {
		return fmt.Errorf("%w: the assignment covers %d containers, the pod has %d vGPU containers", ErrExceedsRequest, len(a.Containers), len(reqs))
	}
	for _, r := range reqs {
		ca := a.Container(r.Name)
		if ca == nil {
			return fmt.Errorf("%w: no entry for vGPU container %q", api.ErrInvalid, r.Name)
		}
		if len(ca.Cards) != r.Cards {
			return fmt.Errorf("%w: container %q gets %d cards, requests %d", ErrExceedsRequest, r.Name, len(ca.Cards), r.Cards)
		}
		for _, c := range ca.Cards {
			if err := t.cardWithin(r, c); err != nil {
				return fmt.Errorf("%w: container %q card %s: %v", ErrExceedsRequest, r.Name, c.UUID, err)
			}
		}
	}
	return nil
}

func (t *Trust) cardWithin(r api.ContainerRequest, c api.CardAssignment) error {
	if c.MemoryMiB <= 0 {
		return fmt.Errorf("memory %d MiB: a limit must be positive (0 would mean none)", c.MemoryMiB)
	}
	total, known := int64(0), false
	if t.CardMemoryMiB != nil {
		total, known = t.CardMemoryMiB(c.UUID)
	}
	switch {
	case r.MemoryMiB > 0 && c.MemoryMiB > r.MemoryMiB:
		return fmt.Errorf("memory %d MiB, requests %d MiB", c.MemoryMiB, r.MemoryMiB)
	case r.MemoryPercent > 0 && known && c.MemoryMiB > (total*int64(r.MemoryPercent)+99)/100:
		return fmt.Errorf("memory %d MiB, requests %d%% of %d MiB", c.MemoryMiB, r.MemoryPercent, total)
	case known && c.MemoryMiB > total:
		return fmt.Errorf("memory %d MiB, the card has %d MiB", c.MemoryMiB, total)
	}
	switch {
	case c.Cores > r.Cores:
		return fmt.Errorf("cores %d%%, requests %d%%", c.Cores, r.Cores)
	case r.Cores > 0 && c.Cores <= 0:
		return fmt.Errorf("cores %d%%, requests %d%% (0 would run uncapped)", c.Cores, r.Cores)
	}
	return nil
}
