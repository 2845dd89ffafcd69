package handoff

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// PreStart runs just before the kubelet starts a container (and again on each restart
// of it). By now the kubelet's table names the container holding these slots: the agent
// checks that container's assignment and its own Allocate record against the slots,
// rewrites the limits file the container reads, and marks the handoff done once every
// vGPU container of the pod got this far.
//
// Under churn the kubelet has been seen to record one slot for two containers it is
// setting up at once (its device accounting let a second admission take a slot the
// first had just been given). A slot is only an admission token: each container's cards,
// memory and cores come from its own assignment, which the scheduler booked. So when
// every container the kubelet names passes the same checks (its own Allocate record for
// exactly these slots, its assignment naming exactly these cards), all of them are
// prepared, whichever the kubelet is starting; if any does not, PreStart refuses.
func (h *Handoff) PreStart(ctx context.Context, ids []string) (err error) {
	start := time.Now()
	defer func() { h.observe("PreStartContainer", start, err) }()
	got, err := h.cards.CardsForSlots(ids)
	if err != nil {
		return err
	}
	owners, err := h.owners(ctx, ids)
	if err != nil {
		return err
	}
	type ready struct {
		pod *corev1.Pod
		rec *records.Record
	}
	var all []ready
	for _, o := range owners {
		pod := h.waitPod(ctx, o.ns, o.name)
		if pod == nil {
			err := fmt.Errorf("%w: the kubelet runs %s/%s container %q on slots %s, but no such pod is bound to node %s",
				ErrUnknownOwner, o.ns, o.name, o.container, strings.Join(ids, ","), h.cfg.Node)
			if len(owners) > 1 {
				return fmt.Errorf("%w: the kubelet reports slots %s held by %v: %v", ErrAmbiguous, strings.Join(ids, ","), owners, err)
			}
			return err
		}
		rec, err := h.verify(ctx, pod, o.container, ids, got)
		if err != nil && len(owners) > 1 {
			return fmt.Errorf("%w: the kubelet reports slots %s held by %v: %s/%s container %q: %v",
				ErrAmbiguous, strings.Join(ids, ","), owners, o.ns, o.name, o.container, err)
		}
		if err != nil {
			h.mark(ctx, pod, api.HandoffFailed, fmt.Sprintf("container %q: %v", o.container, err))
			klog.ErrorS(err, "Refusing PreStartContainer", "pod", klog.KObj(pod), "container", o.container)
			return err
		}
		all = append(all, ready{pod, rec})
	}
	if len(all) > 1 {
		names := make([]string, len(owners))
		for i, o := range owners {
			names[i] = o.String()
		}
		klog.InfoS("The kubelet records these slots for several containers; each passes its own checks, preparing all of them",
			"slots", ids, "containers", names)
	}
	for _, r := range all {
		if err := h.store.WriteLimits(r.rec.UID, r.rec.Container, h.cfg.Container.LimitsFile(r.rec)); err != nil {
			return err
		}
		if err := h.store.MarkStarted(r.rec, h.now()); err != nil {
			return err
		}
		klog.V(3).InfoS("Container handed its cards", "pod", klog.KObj(r.pod), "container", r.rec.Container, "cards", uuidsOf(r.rec.Cards))
		h.MarkIfComplete(ctx, r.pod)
	}
	return nil
}

func (h *Handoff) waitPod(ctx context.Context, ns, name string) *corev1.Pod {
	var pod *corev1.Pod
	nodepods.WaitFor(ctx, h.cfg.IdentifyTimeout, h.cfg.PollInterval, func() bool {
		var ok bool
		pod, ok = h.pods.Get(ns, name)
		return ok
	})
	return pod
}

// slotOwner is a container the kubelet records as holding a set of slots.
type slotOwner struct{ ns, name, container string }

func (o slotOwner) String() string { return o.ns + "/" + o.name + "/" + o.container }

// owners finds the containers the kubelet records as holding exactly these slots: one,
// normally.
func (h *Handoff) owners(ctx context.Context, ids []string) ([]slotOwner, error) {
	list, err := h.kubelet.List(ctx)
	if err != nil {
		return nil, err
	}
	var found []slotOwner
	for _, pr := range list {
		for _, c := range pr.GetContainers() {
			if held := h.slotsHeld(c); len(held) > 0 && sameSet(held, ids) {
				found = append(found, slotOwner{pr.GetNamespace(), pr.GetName(), c.GetName()})
			}
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownOwner, strings.Join(ids, ","))
	}
	return found, nil
}

// verify checks the kubelet's slots and the pod's annotation against Allocate's
// record, and returns the record.
func (h *Handoff) verify(ctx context.Context, pod *corev1.Pod, container string, ids []string, got []api.Card) (*records.Record, error) {
	rec, err := h.store.ReadRecord(string(pod.UID), container)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: Allocate prepared no directory for this container; it served another container with slots %s", ErrMismatch, strings.Join(ids, ","))
	}
	if err != nil {
		return nil, err
	}
	if !sameSet(rec.SlotIDs, ids) {
		return nil, fmt.Errorf("%w: Allocate prepared this container for slots %s, the kubelet starts it with %s",
			ErrMismatch, strings.Join(rec.SlotIDs, ","), strings.Join(ids, ","))
	}
	// What Allocate recorded is what the container gets: it was checked when the
	// kubelet admitted the pod. The annotation must still say the same, so that a pod
	// patched after binding is refused with the reason, never run with other limits.
	uuids := make([]string, len(got))
	for i, c := range got {
		uuids[i] = c.UUID
	}
	if !sameCards(rec.Cards, uuids) {
		return nil, fmt.Errorf("%w: the kubelet gave cards %s, Allocate prepared %s",
			ErrMismatch, strings.Join(uuids, ","), strings.Join(uuidsOf(rec.Cards), ","))
	}
	asg, err := nodepods.ReadAssignment(pod, h.cfg.Node, h.cfg.Names)
	if err != nil {
		h.refused(pod, err)
		return nil, fmt.Errorf("%w: %v", ErrChanged, err)
	}
	ca := asg.Container(container)
	if ca == nil || asg.QoS != rec.QoS || !sameShares(ca.Cards, rec.Cards) {
		err := fmt.Errorf("%w: Allocate prepared %s, the pod now says %s", ErrChanged, describeShares(rec.QoS, rec.Cards), describeContainer(asg, ca))
		h.refused(pod, err)
		return nil, err
	}
	// The instance may have been destroyed, or handed to another pod, since Allocate.
	if err := h.checkMIG(ctx, pod, container, rec.Cards); err != nil {
		h.refused(pod, err)
		return nil, err
	}
	return rec, nil
}

// sameShares reports whether two card lists give the same memory and cores on the same cards.
func sameShares(a, b []api.CardAssignment) bool {
	if len(a) != len(b) {
		return false
	}
	byUUID := make(map[string]api.CardAssignment, len(b))
	for _, c := range b {
		byUUID[c.UUID] = c
	}
	for _, c := range a {
		if o, ok := byUUID[c.UUID]; !ok || o != c {
			return false
		}
	}
	return true
}

func describeShares(qos api.QoSClass, cs []api.CardAssignment) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %d MiB %d%%", c.UUID, c.MemoryMiB, c.Cores)
		if c.IsMIG() {
			parts[i] = fmt.Sprintf("%s MIG %s %d MiB", c.UUID, c.MIG, c.MemoryMiB)
		}
	}
	return fmt.Sprintf("[%s] %s", strings.Join(parts, ", "), qos)
}

func describeContainer(a *api.PodAssignment, ca *api.ContainerAssignment) string {
	if ca == nil {
		return "no entry for the container"
	}
	return describeShares(a.QoS, ca.Cards)
}

// MarkIfComplete marks the handoff done once every vGPU container has been started
// with its limits. Reconcile repeats it, so a crash between the two steps loses nothing.
func (h *Handoff) MarkIfComplete(ctx context.Context, pod *corev1.Pod) bool {
	if pod.Annotations[api.AnnotationHandoff] == api.HandoffDone {
		return true
	}
	asg, err := nodepods.ReadAssignment(pod, h.cfg.Node, h.cfg.Names)
	if err != nil {
		return false
	}
	for _, c := range asg.Containers {
		rec, err := h.store.ReadRecord(string(pod.UID), c.Name)
		if err != nil || rec.Started == nil {
			return false
		}
	}
	return h.mark(ctx, pod, api.HandoffDone, "")
}

func (h *Handoff) mark(ctx context.Context, pod *corev1.Pod, state, msg string) bool {
	if pod.Annotations[api.AnnotationHandoff] == state && pod.Annotations[api.AnnotationHandoffMessage] == msg {
		return true
	}
	if err := h.marker.Mark(ctx, pod, state, msg); err != nil {
		klog.ErrorS(err, "Could not mark the handoff; will retry on the next reconcile", "pod", klog.KObj(pod), "state", state)
		return false
	}
	klog.V(2).InfoS("Marked handoff", "pod", klog.KObj(pod), "state", state)
	return true
}

// slotsHeld is every slot of our resource the kubelet reports for the container. The
// kubelet (v1.34, containerDevicesFromResourceDeviceInstances) reports one entry per
// slot and NUMA node, not one per container: the entries are joined, each slot once.
func (h *Handoff) slotsHeld(c *podresourcesv1.ContainerResources) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range c.GetDevices() {
		if d.GetResourceName() != h.cfg.Resource {
			continue
		}
		for _, id := range d.GetDeviceIds() {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}
