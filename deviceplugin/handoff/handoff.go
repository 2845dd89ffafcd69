// Package handoff decides which pod and container each kubelet device-plugin call
// serves, and sets the container up with exactly its assignment. It never guesses: the
// cards follow from the slot IDs the kubelet passes, the pod from the kubelet's own
// PodResources table, and every answer is checked against the scheduler's annotation.
// docs/device-plugin.md explains the mechanism.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// Config is the part of the agent's configuration the handoff needs.
type Config struct {
	Node string
	// Resource is the extended resource the agent advertises (api.ResourceNumber by default).
	Resource string
	Names    api.ResourceNames
	// IdentifyTimeout bounds the wait for the informer to show a pod the kubelet already tracks.
	IdentifyTimeout time.Duration
	PollInterval    time.Duration
	Container       hookenv.Container
	// Trust decides which assignments are honoured; nil checks requests only (no signatures).
	Trust *nodepods.Trust
	// MIGLayout reads a card's MIG devices now; nil uses the layout discovery read at start.
	MIGLayout MIGLayout
}

// PodLookup finds pods bound to this node. Only pods the scheduler bound here are
// visible: the informer behind it is filtered by spec.nodeName.
type PodLookup interface {
	Get(namespace, name string) (*corev1.Pod, bool)
	// Exists reports whether a pod with this UID is bound to the node.
	Exists(uid types.UID) bool
	// Synced reports whether the lookup has seen the full list once.
	Synced() bool
}

// Marker records the handoff state on the pod (nodepods.PatchMarker in the agent).
type Marker interface {
	Mark(ctx context.Context, pod *corev1.Pod, state, message string) error
}

// KubeletPods is the kubelet's own table of pods and the device IDs it gave each
// container (the PodResources API; package podresources asks it).
type KubeletPods interface {
	List(ctx context.Context) ([]*podresourcesv1.PodResources, error)
}

// Observer receives the outcome of each kubelet call and each refused assignment; the
// metrics package implements it.
type Observer interface {
	ObserveCall(call string, err error, d time.Duration)
	// ObserveRefusal counts an assignment refused for reason (nodepods.RefusalReason).
	ObserveRefusal(reason string)
}

// Handoff serves the kubelet's allocation calls.
type Handoff struct {
	cfg      Config
	cards    *cards.Registry
	pods     PodLookup
	kubelet  KubeletPods
	store    *records.Store
	marker   Marker
	observer Observer
	trust    *nodepods.Trust
	now      func() time.Time
	// admission serialises GetPreferredAllocation and Allocate, which the kubelet itself
	// issues one pod at a time; PreStartContainer runs concurrently.
	admission sync.Mutex
}

// New builds a Handoff; observer may be nil.
func New(cfg Config, reg *cards.Registry, pods PodLookup, kubelet KubeletPods, store *records.Store, marker Marker, observer Observer) *Handoff {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	trust := cfg.Trust
	if trust == nil {
		trust = &nodepods.Trust{}
	}
	if trust.CardMemoryMiB == nil || trust.Verified == nil {
		t := *trust
		if t.CardMemoryMiB == nil {
			t.CardMemoryMiB = func(uuid string) (int64, bool) {
				c, ok := reg.Card(uuid)
				return c.MemoryMiB, ok
			}
		}
		if t.Verified == nil {
			t.Verified = &nodepods.VerifiedMemo{}
		}
		trust = &t
	}
	return &Handoff{cfg: cfg, cards: reg, pods: pods, kubelet: kubelet, store: store, marker: marker, observer: observer, now: time.Now, trust: trust}
}

// refused counts an assignment the agent will not honour, and says why in the log (the
// kubelet puts the call's error on the pod as an event).
func (h *Handoff) refused(pod *corev1.Pod, err error) {
	reason := nodepods.RefusalReason(err)
	switch {
	case errors.Is(err, ErrChanged):
		reason = "changed"
	case errors.Is(err, ErrMIG):
		reason = "mig"
	}
	if h.observer != nil {
		h.observer.ObserveRefusal(reason)
	}
	klog.V(2).InfoS("Assignment not honoured", "pod", klog.KObj(pod), "reason", reason, "err", err)
}

func (h *Handoff) observe(call string, start time.Time, err error) {
	if h.observer != nil {
		h.observer.ObserveCall(call, err, time.Since(start))
	}
}

// Preferred answers GetPreferredAllocation for one container: one free slot on each card
// of the container the kubelet is setting up.
func (h *Handoff) Preferred(ctx context.Context, req *pluginapi.ContainerPreferredAllocationRequest) (ids []string, err error) {
	start := time.Now()
	defer func() { h.observe("GetPreferredAllocation", start, err) }()
	h.admission.Lock()
	defer h.admission.Unlock()
	size := int(req.GetAllocationSize())
	free := map[string][]string{} // card UUID -> available slot IDs
	for _, id := range req.GetAvailableDeviceIDs() {
		uuid, _, err := cards.ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		free[uuid] = append(free[uuid], id)
	}
	for _, ids := range free {
		sort.Slice(ids, func(a, b int) bool { return slotLess(ids[a], ids[b]) })
	}
	deadline := time.Now().Add(h.cfg.IdentifyTimeout)
	for {
		v, verr := h.view(ctx, nil)
		if verr == nil {
			ids, done, perr := h.preferFrom(v, free, req.GetMustIncludeDeviceIDs(), size)
			if done {
				return ids, perr
			}
			verr = perr
		}
		if time.Now().After(deadline) {
			return nil, verr
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%v)", verr, ctx.Err())
		case <-time.After(h.cfg.PollInterval):
		}
	}
}

// preferFrom picks slots for the viable candidates; done is false when waiting for the
// informer could still change the answer.
func (h *Handoff) preferFrom(v *kubeletView, free map[string][]string, must []string, size int) ([]string, bool, error) {
	var picks [][]string
	var viable []candidate
	var full []string
	for _, c := range v.cands {
		if len(c.c.Cards) != size {
			continue
		}
		ids, ok := pickSlots(c.c.Cards, free, must)
		if !ok {
			full = append(full, h.describe([]candidate{c}))
			continue
		}
		viable = append(viable, c)
		picks = append(picks, ids)
	}
	for i := 1; i < len(viable); i++ {
		if !sameCards(viable[i].c.Cards, uuidsOf(viable[0].c.Cards)) {
			return nil, true, fmt.Errorf("%w: %d containers of %d cards wait with different cards: %s", ErrAmbiguous, len(viable), size, h.describe(viable))
		}
	}
	if len(viable) > 0 {
		klog.V(4).InfoS("Preferring slots", "pod", klog.KObj(viable[0].pod), "container", viable[0].c.Name, "slots", picks[0])
		return picks[0], true, nil
	}
	err := fmt.Errorf("%w: no container of %d cards waits with a free slot on each of its cards; waiting: [%s]; cards without a free slot for: [%s]; unusable assignments: [%s]; pods not yet seen: [%s]",
		ErrNoPendingContainer, size, h.describe(v.cands), strings.Join(full, "; "), strings.Join(v.problems, "; "), strings.Join(v.unknown, ", "))
	return nil, len(v.unknown) == 0, err
}

// unhealthyNote names the cards of an assignment that are unhealthy now, and why: the
// kubelet offers no slot of such a card.
func (h *Handoff) unhealthyNote(cs []api.CardAssignment) string {
	var out []string
	for _, c := range cs {
		if r := h.cards.UnhealthyReason(c.UUID); r != "" {
			out = append(out, fmt.Sprintf("%s unhealthy: %s", c.UUID, r))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

// pickSlots takes, for each card, a slot the kubelet must include if there is one, or
// else the lowest free slot.
func pickSlots(want []api.CardAssignment, free map[string][]string, must []string) ([]string, bool) {
	mustOn := map[string]string{}
	for _, id := range must {
		uuid, _, err := cards.ParseSlotID(id)
		if err != nil {
			return nil, false
		}
		mustOn[uuid] = id
	}
	ids := make([]string, 0, len(want))
	for _, c := range want {
		if id, ok := mustOn[c.UUID]; ok {
			ids = append(ids, id)
			delete(mustOn, c.UUID)
			continue
		}
		if len(free[c.UUID]) == 0 {
			return nil, false
		}
		ids = append(ids, free[c.UUID][0])
	}
	return ids, len(mustOn) == 0
}

// Allocate sets up each container of the request: its cards from its slot IDs, its
// pod and limits from the one pending container that wants exactly those cards.
func (h *Handoff) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (resp *pluginapi.AllocateResponse, err error) {
	start := time.Now()
	defer func() { h.observe("Allocate", start, err) }()
	h.admission.Lock()
	defer h.admission.Unlock()
	resp = &pluginapi.AllocateResponse{}
	exclude := map[string]bool{}
	for i, cr := range req.GetContainerRequests() {
		r, key, err := h.allocateOne(ctx, cr.GetDevicesIds(), exclude)
		if err != nil {
			klog.ErrorS(err, "Refusing Allocate", "container", i, "slots", cr.GetDevicesIds())
			return nil, fmt.Errorf("allocate container request %d (slots %s): %w", i, strings.Join(cr.GetDevicesIds(), ","), err)
		}
		exclude[key] = true
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

func (h *Handoff) allocateOne(ctx context.Context, ids []string, exclude map[string]bool) (*pluginapi.ContainerAllocateResponse, string, error) {
	got, err := h.cards.CardsForSlots(ids)
	if err != nil {
		return nil, "", err
	}
	uuids := make([]string, len(got))
	for i, c := range got {
		uuids[i] = c.UUID
		// The kubelet picks among the slots it last saw healthy and keeps its pick while
		// it waits for GetPreferredAllocation, even if the card fails meanwhile: refuse
		// rather than hand a new container a card known to be broken.
		if !c.Healthy {
			return nil, "", fmt.Errorf("%w: %s (%s) turned unhealthy after the kubelet chose its slots",
				ErrUnhealthyCard, c.UUID, h.cards.UnhealthyReason(c.UUID))
		}
	}
	c, err := h.identify(ctx, uuids, exclude)
	if err != nil {
		return nil, "", err
	}
	if err := h.checkMIG(ctx, c.pod, c.c.Name, c.c.Cards); err != nil {
		h.refused(c.pod, err)
		h.mark(ctx, c.pod, api.HandoffFailed, fmt.Sprintf("container %q: %v", c.c.Name, err))
		return nil, "", err
	}
	rec := &records.Record{Namespace: c.pod.Namespace, Pod: c.pod.Name, UID: string(c.pod.UID), Container: c.c.Name,
		SlotIDs: append([]string(nil), ids...), Cards: h.indexOrder(c.c.Cards), QoS: c.asg.QoS, Allocated: h.now()}
	// The pod spec is the tenant's: only a region volume as Tessera makes it holds the
	// region where the agent reads it; anything else leaves it in the container's /dev/shm.
	if err := api.CheckRegionVolume(c.pod, c.c.Name); err != nil {
		klog.V(2).InfoS("The container keeps its region in its /dev/shm; its usage will be missing from the agent's metrics",
			"pod", klog.KObj(c.pod), "container", c.c.Name, "reason", err.Error())
	} else {
		rec.RegionVolume = true
	}
	if err := h.store.Prepare(rec, h.cfg.Container.LimitsFile(rec)); err != nil {
		return nil, "", err
	}
	klog.V(3).InfoS("Allocated", "pod", klog.KObj(c.pod), "container", c.c.Name, "cards", uuids, "mig", migsOf(rec.Cards))
	return h.cfg.Container.Response(rec, h.store.ContainerDir(rec.UID, rec.Container)), c.key(), nil
}

// indexOrder sorts a container's cards by NVML index, the order CUDA ordinals follow.
func (h *Handoff) indexOrder(in []api.CardAssignment) []api.CardAssignment {
	out := append([]api.CardAssignment(nil), in...)
	idx := func(u string) int {
		if c, ok := h.cards.Card(u); ok {
			return c.Index
		}
		return 1 << 30
	}
	sort.SliceStable(out, func(a, b int) bool { return idx(out[a].UUID) < idx(out[b].UUID) })
	return out
}

// migsOf lists the MIG devices of a container's cards; nil when it has none.
func migsOf(cs []api.CardAssignment) []string {
	var out []string
	for _, c := range cs {
		if c.IsMIG() {
			out = append(out, c.MIG)
		}
	}
	return out
}

func uuidsOf(cs []api.CardAssignment) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.UUID
	}
	return out
}

func slotLess(a, b string) bool {
	_, x, _ := cards.ParseSlotID(a)
	_, y, _ := cards.ParseSlotID(b)
	return x < y
}
