package handoff

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// ErrMIG is wrapped when a card assignment and the node's MIG layout disagree: a MIG
// device that is not an instance of the named card now, one already given to another
// live pod, an instance on a card not in MIG mode, or a share of a card in MIG mode.
var ErrMIG = errors.New("MIG assignment not honoured")

// MIGLayout reads the MIG devices of the card with this UUID as NVML reports them at
// the time of the call (the agent reads them through discovery.ReadMIGDevices).
type MIGLayout func(parent string) ([]api.MIGInstance, error)

// migLayout is the card's layout now: from NVML when the agent wired it, else as
// discovery read it at start.
func (h *Handoff) migLayout(parent string) ([]api.MIGInstance, error) {
	if h.cfg.MIGLayout != nil {
		return h.cfg.MIGLayout(parent)
	}
	c, ok := h.cards.Card(parent)
	if !ok {
		return nil, fmt.Errorf("card %s is not on this node", parent)
	}
	if c.MIGInstances == nil {
		return nil, fmt.Errorf("the MIG layout of card %s could not be read at start", parent)
	}
	return c.MIGInstances, nil
}

// checkMIG checks a container's cards against the node's MIG state before it is given
// them. A card in MIG mode is handed out only as whole MIG instances, each the instance
// of the profile the container asks for, on the card the assignment names, as NVML
// lists it now, and to one live pod at a time; a card not in MIG mode is never handed
// out as an instance. The assignment is the scheduler's (signed, checked by Trust), so
// a refusal here is a node that changed since the scheduler looked, or a scheduler bug.
func (h *Handoff) checkMIG(ctx context.Context, pod *corev1.Pod, container string, cs []api.CardAssignment) error {
	var profile string
	var anyMIG bool
	for _, c := range cs {
		card, ok := h.cards.Card(c.UUID)
		switch {
		case !ok:
			return fmt.Errorf("%w: card %s is not on node %s", ErrMismatch, c.UUID, h.cfg.Node)
		case card.MIG && !c.IsMIG():
			return fmt.Errorf("%w: card %s is in MIG mode and is handed out only as whole MIG instances; the assignment gives %d MiB %d%% of it and names no instance",
				ErrMIG, c.UUID, c.MemoryMiB, c.Cores)
		case !card.MIG && c.IsMIG():
			return fmt.Errorf("%w: the assignment names MIG device %s on card %s, which is not in MIG mode", ErrMIG, c.MIG, c.UUID)
		}
		anyMIG = anyMIG || c.IsMIG()
	}
	if !anyMIG {
		return nil
	}
	reqs, err := h.cfg.Names.ContainerRequests(pod)
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if r.Name == container {
			profile = r.MIGProfile
		}
	}
	for _, c := range cs {
		in, err := h.instance(c)
		if err != nil {
			return err
		}
		if profile != "" && in.Profile != profile {
			return fmt.Errorf("%w: MIG device %s on card %s is a %s instance, the pod asks for %s (annotation %s)",
				ErrMIG, c.MIG, c.UUID, in.Profile, profile, api.AnnotationMIGProfile)
		}
		if c.MemoryMiB > in.MemoryMiB {
			return fmt.Errorf("%w: MIG device %s on card %s has %d MiB, the assignment gives %d MiB",
				ErrMIG, c.MIG, c.UUID, in.MemoryMiB, c.MemoryMiB)
		}
	}
	return h.checkMIGFree(ctx, pod, cs)
}

// instance finds the assignment's MIG device among its parent card's instances now.
func (h *Handoff) instance(c api.CardAssignment) (api.MIGInstance, error) {
	layout, err := h.migLayout(c.UUID)
	if err != nil {
		return api.MIGInstance{}, fmt.Errorf("%w: MIG device %s: cannot read card %s's instances: %v", ErrMIG, c.MIG, c.UUID, err)
	}
	have := make([]string, len(layout))
	for i, in := range layout {
		if in.UUID == c.MIG {
			return in, nil
		}
		have[i] = in.UUID + " (" + in.Profile + ")"
	}
	return api.MIGInstance{}, fmt.Errorf("%w: MIG device %s is not an instance of card %s on node %s now; the card's instances: [%s]",
		ErrMIG, c.MIG, c.UUID, h.cfg.Node, strings.Join(have, ", "))
}

// checkMIGFree refuses a MIG device that a container of another live pod holds: the
// agent's own records say which containers it set up with which instance.
func (h *Handoff) checkMIGFree(ctx context.Context, pod *corev1.Pod, cs []api.CardAssignment) error {
	recs, err := h.store.Records()
	if err != nil {
		return fmt.Errorf("%w: cannot tell which pods hold MIG devices: %v", ErrMIG, err)
	}
	want := map[string]bool{}
	for _, c := range cs {
		if c.IsMIG() {
			want[c.MIG] = true
		}
	}
	var tracked map[string]bool // the kubelet's pods, asked for at most once
	for uid, rs := range recs {
		if uid == string(pod.UID) {
			continue
		}
		for _, r := range rs {
			for _, c := range r.Cards {
				if !c.IsMIG() || !want[c.MIG] {
					continue
				}
				if tracked == nil {
					if tracked, err = h.kubeletPods(ctx); err != nil {
						return fmt.Errorf("%w: cannot tell whether %s/%s still holds MIG device %s: %v", ErrMIG, r.Namespace, r.Pod, c.MIG, err)
					}
				}
				if h.live(r, tracked) {
					return fmt.Errorf("%w: MIG device %s on card %s is already given to %s/%s container %q, which is still on the node",
						ErrMIG, c.MIG, c.UUID, r.Namespace, r.Pod, r.Container)
				}
			}
		}
	}
	return nil
}

// live reports whether the pod of a record may still run its containers: the API
// server shows it (same UID) and it has not finished. A record whose pod the API server
// no longer shows under that name counts as live while the kubelet still tracks the
// name (a pod deleted by force whose containers are still stopping); a pod that took
// its name since (same name, new UID) means the old one is gone.
func (h *Handoff) live(r *records.Record, tracked map[string]bool) bool {
	if pod, ok := h.pods.Get(r.Namespace, r.Pod); ok {
		if string(pod.UID) != r.UID {
			return false
		}
		return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
	}
	return h.pods.Exists(types.UID(r.UID)) || tracked[r.Namespace+"/"+r.Pod]
}

// kubeletPods is the set of namespace/name of the pods the kubelet tracks.
func (h *Handoff) kubeletPods(ctx context.Context) (map[string]bool, error) {
	list, err := h.kubelet.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(list))
	for _, pr := range list {
		out[pr.GetNamespace()+"/"+pr.GetName()] = true
	}
	return out, nil
}
