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
func (h *Handoff) PreStart(ctx context.Context, ids []string) (err error) {
	start := time.Now()
	defer func() { h.observe("PreStartContainer", start, err) }()
	got, err := h.cards.CardsForSlots(ids)
	if err != nil {
		return err
	}
	ns, name, container, err := h.owner(ctx, ids)
	if err != nil {
		return err
	}
	var pod *corev1.Pod
	nodepods.WaitFor(ctx, h.cfg.IdentifyTimeout, h.cfg.PollInterval, func() bool {
		var ok bool
		pod, ok = h.pods.Get(ns, name)
		return ok
	})
	if pod == nil {
		return fmt.Errorf("%w: the kubelet runs %s/%s container %q on slots %s, but no such pod is bound to node %s",
			ErrUnknownOwner, ns, name, container, strings.Join(ids, ","), h.cfg.Node)
	}
	rec, err := h.verify(pod, container, ids, got)
	if err != nil {
		h.mark(ctx, pod, api.HandoffFailed, fmt.Sprintf("container %q: %v", container, err))
		klog.ErrorS(err, "Refusing PreStartContainer", "pod", klog.KObj(pod), "container", container)
		return err
	}
	if err := h.store.WriteLimits(rec.UID, rec.Container, h.cfg.Container.LimitsFile(rec)); err != nil {
		return err
	}
	if err := h.store.MarkStarted(rec, h.now()); err != nil {
		return err
	}
	klog.V(3).InfoS("Container handed its cards", "pod", klog.KObj(pod), "container", container, "cards", uuidsOf(rec.Cards))
	h.MarkIfComplete(ctx, pod)
	return nil
}

// owner finds the one container the kubelet records as holding exactly these slots.
func (h *Handoff) owner(ctx context.Context, ids []string) (string, string, string, error) {
	list, err := h.kubelet.List(ctx)
	if err != nil {
		return "", "", "", err
	}
	var found []string
	var ns, name, container string
	for _, pr := range list {
		for _, c := range pr.GetContainers() {
			if held := h.slotsHeld(c); len(held) > 0 && sameSet(held, ids) {
				ns, name, container = pr.GetNamespace(), pr.GetName(), c.GetName()
				found = append(found, ns+"/"+name+"/"+container)
			}
		}
	}
	switch len(found) {
	case 0:
		return "", "", "", fmt.Errorf("%w: %s", ErrUnknownOwner, strings.Join(ids, ","))
	case 1:
		return ns, name, container, nil
	}
	return "", "", "", fmt.Errorf("%w: the kubelet reports slots %s held by %v", ErrAmbiguous, strings.Join(ids, ","), found)
}

// verify checks the kubelet's slots against Allocate's record and the assignment, and
// returns the record with the assignment's current limits.
func (h *Handoff) verify(pod *corev1.Pod, container string, ids []string, got []api.Card) (*records.Record, error) {
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
	asg, err := nodepods.ReadAssignment(pod, h.cfg.Node, h.cfg.Names)
	if err != nil {
		return nil, err
	}
	ca := asg.Container(container)
	if ca == nil {
		return nil, fmt.Errorf("%w: %s has no entry for container %q", ErrMismatch, api.AnnotationAssignment, container)
	}
	uuids := make([]string, len(got))
	for i, c := range got {
		uuids[i] = c.UUID
	}
	if !sameCards(ca.Cards, uuids) {
		return nil, fmt.Errorf("%w: the kubelet gave cards %s, the scheduler assigned %s",
			ErrMismatch, strings.Join(uuids, ","), strings.Join(uuidsOf(ca.Cards), ","))
	}
	rec.Cards, rec.QoS = h.indexOrder(ca.Cards), asg.QoS
	return rec, nil
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
