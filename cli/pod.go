package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// PodView is a pod's assignment and where its node handoff stands.
type PodView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Node      string `json:"node,omitempty"`
	Queue     string `json:"queue,omitempty"`
	VGPU      bool   `json:"vgpu"`
	// Source of the assignment: tessera (tessera.io/assignment) or volcano (volcano.sh/vgpu-ids-new).
	Source     string        `json:"source,omitempty"`
	QoS        api.QoSClass  `json:"qos,omitempty"`
	AssignedAt string        `json:"assignedAt,omitempty"`
	Containers []PodCardView `json:"containers,omitempty"`
	// Handoff is tessera.io/handoff: pending, done or failed.
	Handoff        string `json:"handoff,omitempty"`
	HandoffMessage string `json:"handoffMessage,omitempty"`
	// Claims are the pod's ResourceClaims of Tessera's DRA devices, with the cards the
	// allocator gave them; ClaimsUnknown says why they could not be read, for a pod that
	// references claims. Both added within cli.tessera.io/v1.
	Claims        []PodClaimView `json:"claims,omitempty"`
	ClaimsUnknown string         `json:"claimsUnknown,omitempty"`
	// Next says what to look at next, in words.
	Next  string `json:"next,omitempty"`
	Error string `json:"error,omitempty"`
}

// PodCardView is one container's cards.
type PodCardView struct {
	Container string         `json:"container"`
	Cards     []PodCardEntry `json:"cards"`
}

// PodCardEntry is one card of a container, with what the node says about it.
type PodCardEntry struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model,omitempty"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	Healthy   *bool  `json:"healthy,omitempty"`
}

// PodView describes pod against the snapshot's nodes.
func (s *Snapshot) PodView(pod *corev1.Pod) *PodView {
	v := &PodView{Namespace: pod.Namespace, Name: pod.Name, Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName,
		Queue: Queue(pod), VGPU: s.Args.Resources.HasVGPURequest(pod),
		Handoff: pod.Annotations[api.AnnotationHandoff], HandoffMessage: pod.Annotations[api.AnnotationHandoffMessage]}
	if ns, err := strconv.ParseInt(pod.Annotations[api.AnnotationAssignedAt], 10, 64); err == nil {
		v.AssignedAt = time.Unix(0, ns).UTC().Format(time.RFC3339)
	}
	cs, qos, ok, err := s.podAssignment(pod)
	switch {
	case err != nil:
		v.Error = err.Error()
	case ok:
		v.Source, v.QoS = "tessera", qos
		if _, t := pod.Annotations[api.AnnotationAssignment]; !t {
			v.Source = "volcano"
		}
		cards := s.cardIndex(pod.Spec.NodeName)
		for _, c := range cs {
			pc := PodCardView{Container: c.Name}
			for _, a := range c.Cards {
				e := PodCardEntry{UUID: a.UUID, Index: -1, MemoryMiB: a.MemoryMiB, Cores: a.Cores}
				if card, found := cards[a.UUID]; found {
					h := card.Healthy
					e.Index, e.Model, e.Healthy = card.Index, card.Model, &h
				}
				pc.Cards = append(pc.Cards, e)
			}
			v.Containers = append(v.Containers, pc)
		}
	}
	v.Claims = s.podClaims(pod)
	v.ClaimsUnknown = s.podClaimsUnknown(pod)
	v.Next = nextStep(v)
	return v
}

// cardIndex maps the node's card UUIDs to their inventory entries, ignoring heartbeat age.
func (s *Snapshot) cardIndex(node string) map[string]api.Card {
	m := map[string]api.Card{}
	for i := range s.Nodes {
		if s.Nodes[i].Name != node {
			continue
		}
		inv, _, err := nodeInventory(&s.Nodes[i], s.Now, 0)
		if err == nil && inv != nil {
			for _, c := range inv.Cards {
				m[c.UUID] = c
			}
		}
	}
	return m
}

func nextStep(v *PodView) string {
	if !v.VGPU && (len(v.Claims) > 0 || v.ClaimsUnknown != "") {
		return claimsNextStep(v)
	}
	switch {
	case !v.VGPU:
		return "the pod requests no vGPU resources; Tessera does not touch it"
	case v.Error != "":
		return "the assignment annotation is unreadable; the node agent will refuse the pod"
	case v.Node == "" && len(v.Containers) == 0:
		return "not scheduled yet: run `tessera explain " + v.Name + " -n " + v.Namespace + "`"
	case v.Handoff == api.HandoffFailed:
		return "the node agent refused the handoff (see its message and the pod's events); the pod does not start on these cards"
	case v.Handoff == api.HandoffDone:
		return "the node agent set up every vGPU container with exactly these cards and limits"
	case v.Node != "" && v.Phase == string(corev1.PodPending):
		return "bound; waiting for the kubelet to admit it and the node agent to hand the cards over"
	}
	return ""
}

// WritePod prints the pod view for people.
func WritePod(w io.Writer, v *PodView) error {
	fmt.Fprintf(w, "Pod:        %s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(w, "Phase:      %s\n", v.Phase)
	fmt.Fprintf(w, "Node:       %s\n", dash(v.Node))
	fmt.Fprintf(w, "Queue:      %s\n", dash(v.Queue))
	if v.Error != "" {
		fmt.Fprintf(w, "Assignment: unreadable: %s\n", v.Error)
	} else if len(v.Containers) > 0 {
		fmt.Fprintf(w, "Assignment: %s, qos %s, at %s\n", v.Source, v.QoS, dash(v.AssignedAt))
		for _, c := range v.Containers {
			fmt.Fprintf(w, "  container %s:\n", c.Container)
			for _, e := range c.Cards {
				health := ""
				if e.Healthy != nil && !*e.Healthy {
					health = "  UNHEALTHY"
				}
				idx := "?"
				if e.Index >= 0 {
					idx = strconv.Itoa(e.Index)
				}
				fmt.Fprintf(w, "    card %s %s %s: %d MiB, %d%% cores%s\n", idx, e.UUID, dash(e.Model), e.MemoryMiB, e.Cores, health)
			}
		}
	} else {
		fmt.Fprintln(w, "Assignment: none")
	}
	writePodClaims(w, v)
	fmt.Fprintf(w, "Handoff:    %s\n", dash(v.Handoff))
	if v.HandoffMessage != "" {
		fmt.Fprintf(w, "  message:  %s\n", v.HandoffMessage)
	}
	if v.Next != "" {
		fmt.Fprintf(w, "Next:       %s\n", v.Next)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
