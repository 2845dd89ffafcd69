package handoff

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/tessera-gpu/tessera/api"
)

// Refusal reasons. Each is wrapped with the pods and cards involved.
var (
	// ErrNoPendingContainer: no container the kubelet is setting up wants these cards.
	ErrNoPendingContainer = errors.New("no pending container on this node matches")
	// ErrAmbiguous: more than one container could be the one the kubelet is setting up.
	ErrAmbiguous = errors.New("cannot tell which container the kubelet is setting up")
	// ErrUnknownOwner: the kubelet reports no container holding the slots of a PreStart call.
	ErrUnknownOwner = errors.New("the kubelet reports no container holding these slots")
	// ErrMismatch: the kubelet's slots and the scheduler's assignment disagree.
	ErrMismatch = errors.New("slots do not match the assignment")
	// ErrUnhealthyCard: the kubelet allocates slots of a card that is unhealthy by now.
	ErrUnhealthyCard = errors.New("unhealthy card")
	// ErrChanged: the pod's assignment no longer says what Allocate prepared.
	ErrChanged = errors.New("the assignment changed after the container was allocated")
)

// candidate is the next container of one pod that the kubelet will set up: the first
// vGPU container, in the kubelet's order (spec order), that holds no slot yet.
type candidate struct {
	pod *corev1.Pod
	asg *api.PodAssignment
	c   api.ContainerAssignment
}

func (c candidate) key() string { return string(c.pod.UID) + "/" + c.c.Name }

func (c candidate) String() string {
	uuids := make([]string, len(c.c.Cards))
	for i, card := range c.c.Cards {
		uuids[i] = card.UUID
	}
	return fmt.Sprintf("%s/%s container %q (cards %s)", c.pod.Namespace, c.pod.Name, c.c.Name, strings.Join(uuids, ","))
}

// kubeletView is what the kubelet is about to set up, joined with the assignments.
type kubeletView struct {
	cands    []candidate
	problems []string // pods the kubelet tracks whose assignment cannot be used
	unknown  []string // pods the kubelet tracks that the informer has not shown yet
}

// view asks the kubelet which pods it tracks and which of their containers hold slots
// of our resource. A pod the kubelet is admitting is in that list, with no slots yet
// for the container being set up; pods the kubelet has not seen are not.
func (h *Handoff) view(ctx context.Context, exclude map[string]bool) (*kubeletView, error) {
	list, err := h.kubelet.List(ctx)
	if err != nil {
		return nil, err
	}
	v := &kubeletView{}
	for _, pr := range list {
		pod, ok := h.pods.Get(pr.GetNamespace(), pr.GetName())
		if !ok {
			v.unknown = append(v.unknown, pr.GetNamespace()+"/"+pr.GetName())
			continue
		}
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
			!h.cfg.Names.HasVGPURequest(pod) {
			continue
		}
		c, err := h.nextContainer(pod, pr, exclude)
		if err != nil {
			v.problems = append(v.problems, fmt.Sprintf("%s/%s: %v", pod.Namespace, pod.Name, err))
			continue
		}
		if c != nil {
			v.cands = append(v.cands, *c)
		}
	}
	return v, nil
}

func (h *Handoff) nextContainer(pod *corev1.Pod, pr *podresourcesv1.PodResources, exclude map[string]bool) (*candidate, error) {
	holding := map[string]bool{}
	for _, c := range pr.GetContainers() {
		for _, d := range c.GetDevices() {
			if d.GetResourceName() == h.cfg.Resource && len(d.GetDeviceIds()) > 0 {
				holding[c.GetName()] = true
			}
		}
	}
	if allHolding(pod, corev1.ResourceName(h.cfg.Resource), holding) {
		return nil, nil // fully set up: skip decoding its assignment
	}
	asg, err := h.trust.Read(pod, h.cfg.Node, h.cfg.Names)
	if err != nil {
		h.refused(pod, err)
		return nil, err
	}
	reqs, err := h.cfg.Names.ContainerRequests(pod)
	if err != nil {
		return nil, err
	}
	// Trust.Read checked that the assignment has an entry of the requested card count
	// for each of these containers and no other.
	for _, r := range reqs {
		c := candidate{pod: pod, asg: asg, c: *asg.Container(r.Name)}
		if holding[r.Name] || exclude[c.key()] {
			continue
		}
		return &c, nil
	}
	return nil, nil
}

// allHolding reports whether every container that asks the kubelet for the resource
// already holds slots of it.
func allHolding(pod *corev1.Pod, resource corev1.ResourceName, holding map[string]bool) bool {
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[resource]; ok && q.Value() > 0 && !holding[c.Name] {
			return false
		}
	}
	return true
}

// identify finds the one container the kubelet is setting up with slots on exactly
// these cards. It waits for the informer only while the kubelet tracks pods the
// informer has not shown yet; otherwise it answers at once.
func (h *Handoff) identify(ctx context.Context, uuids []string, exclude map[string]bool) (*candidate, error) {
	deadline := time.Now().Add(h.cfg.IdentifyTimeout)
	for {
		v, err := h.view(ctx, exclude)
		var matches []candidate
		if err == nil {
			for _, c := range v.cands {
				if sameCards(c.c.Cards, uuids) {
					matches = append(matches, c)
				}
			}
			switch {
			case len(matches) == 1:
				return &matches[0], nil
			case len(matches) > 1:
				return nil, fmt.Errorf("%w: %d containers wait for cards %s: %s", ErrAmbiguous, len(matches), strings.Join(uuids, ","), h.describe(matches))
			}
			err = fmt.Errorf("%w: cards %s; waiting containers: [%s]; unusable assignments: [%s]; pods not yet seen: [%s]",
				ErrNoPendingContainer, strings.Join(uuids, ","), h.describe(v.cands), strings.Join(v.problems, "; "), strings.Join(v.unknown, ", "))
			if len(v.unknown) == 0 {
				return nil, err
			}
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-time.After(h.cfg.PollInterval):
		}
	}
}

// describe lists candidates with their cards, and which of those are unhealthy now.
func (h *Handoff) describe(cs []candidate) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String() + h.unhealthyNote(c.c.Cards)
	}
	return strings.Join(s, "; ")
}

func sameCards(cards []api.CardAssignment, uuids []string) bool {
	if len(cards) != len(uuids) {
		return false
	}
	a := make([]string, len(cards))
	for i, c := range cards {
		a[i] = c.UUID
	}
	return sameSet(a, uuids)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x := append([]string(nil), a...)
	y := append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
