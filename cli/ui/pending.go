package ui

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// groupNameKey is the pod annotation naming its Volcano PodGroup.
const groupNameKey = "scheduling.k8s.io/group-name"

// Where a pending entry's reason was read.
const (
	FromPod      = "pod"      // the pod's PodScheduled condition, as the scheduler wrote it
	FromPodGroup = "podgroup" // its PodGroup's Unschedulable condition
	FromPhase    = "phase"    // its PodGroup's phase: not admitted yet, or admitted and waiting
	FromNothing  = "none"     // nothing written yet
	FromInvalid  = "invalid"  // the vgpu plugin cannot read the request
)

// What a pending entry is.
const (
	KindPod      = "Pod"
	KindPodGroup = "PodGroup"
)

// Reasons the page words itself where the scheduler has written none.
const (
	noReasonYet   = "waiting for the scheduler's next session; no reason written yet"
	notAdmitted   = "the job waits for its queue to admit it (PodGroup Pending); its pods are created once it is admitted"
	admittedState = "admitted to its queue (PodGroup Inqueue); waiting for the scheduler to place its pods"
)

// Pending is a vGPU pod waiting for cards, or a gang whose pods do not exist yet
// because its queue has not admitted it, with the scheduler's reason.
type Pending struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Job is the VolcanoJob that owns the PodGroup, when there is one.
	Job    string `json:"job,omitempty"`
	Queue  string `json:"queue,omitempty"`
	Colour string `json:"colour"`
	// Asks is the request in words: per container, cards × memory, cores.
	Asks  string `json:"asks"`
	Since string `json:"since"`
	// Reason is the scheduler's own words where it wrote any; From says where.
	Reason string `json:"reason"`
	From   string `json:"from"`
}

// podGroup is the part of a Volcano PodGroup the page reads.
type podGroup struct {
	Metadata struct {
		Name              string                  `json:"name"`
		Namespace         string                  `json:"namespace"`
		CreationTimestamp metav1.Time             `json:"creationTimestamp"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		MinMember    int32                        `json:"minMember"`
		Queue        string                       `json:"queue"`
		MinResources map[string]resource.Quantity `json:"minResources"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type               string      `json:"type"`
			Status             string      `json:"status"`
			Reason             string      `json:"reason"`
			Message            string      `json:"message"`
			LastTransitionTime metav1.Time `json:"lastTransitionTime"`
		} `json:"conditions"`
	} `json:"status"`
}

// decodePodGroups maps namespace/name to each PodGroup.
func decodePodGroups(objs []*unstructured.Unstructured) map[string]*podGroup {
	out := map[string]*podGroup{}
	for _, u := range objs {
		g := &podGroup{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, g); err != nil {
			klog.V(2).InfoS("Skipping a PodGroup the page cannot read", "podGroup", klog.KObj(u), "err", err)
			continue
		}
		out[g.Metadata.Namespace+"/"+g.Metadata.Name] = g
	}
	return out
}

// unschedulable is the PodGroup's latest Unschedulable condition in force, "" if none.
func (g *podGroup) unschedulable() string {
	var reason string
	var at time.Time
	for _, c := range g.Status.Conditions {
		if c.Type == "Unschedulable" && c.Status == string(corev1.ConditionTrue) && !c.LastTransitionTime.Time.Before(at) {
			reason, at = joinReason(c.Reason, c.Message), c.LastTransitionTime.Time
		}
	}
	return reason
}

func (g *podGroup) job() string {
	for _, o := range g.Metadata.OwnerReferences {
		if o.Kind == "Job" {
			return o.Name
		}
	}
	return ""
}

// pending lists the vGPU pods waiting for cards and the vGPU gangs not yet admitted,
// oldest first.
func pending(snap *cli.Snapshot, groups map[string]*podGroup, args pluginargs.Args) []Pending {
	out := []Pending{}
	hasPods := map[string]bool{}
	for i := range snap.Pods {
		p := &snap.Pods[i]
		key := p.Namespace + "/" + p.Annotations[groupNameKey]
		hasPods[key] = true
		if !args.Resources.HasVGPURequest(p) || !waiting(p) {
			continue
		}
		e := Pending{Kind: KindPod, Namespace: p.Namespace, Name: p.Name, Queue: cli.Queue(p), Since: stamp(p.CreationTimestamp)}
		g := groups[key]
		if g != nil {
			e.Job = g.job()
		}
		req, err := args.Request(p)
		if err != nil {
			e.Reason, e.From = "vgpu: "+err.Error(), FromInvalid
		} else {
			e.Asks = asks(req.Containers)
			e.Reason, e.From = podReason(p, g)
		}
		e.Colour = cli.QueueColourOf(e.Queue)
		out = append(out, e)
	}
	for key, g := range groups {
		if hasPods[key] || (g.Status.Phase != "Pending" && g.Status.Phase != "") {
			continue
		}
		cards, ok := g.Spec.MinResources[string(args.Resources.Number)]
		if !ok || cards.Value() <= 0 {
			continue
		}
		e := Pending{Kind: KindPodGroup, Namespace: g.Metadata.Namespace, Name: g.Metadata.Name, Job: g.job(), Queue: g.Spec.Queue,
			Colour: cli.QueueColourOf(g.Spec.Queue), Since: stamp(g.Metadata.CreationTimestamp),
			Asks: fmt.Sprintf("gang of %d, %d cards in all", g.Spec.MinMember, cards.Value())}
		e.Reason, e.From = g.unschedulable(), FromPodGroup
		if e.Reason == "" {
			e.Reason, e.From = notAdmitted, FromPhase
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Since != b.Since {
			return a.Since < b.Since
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// podReason prefers the pod's own PodScheduled condition (the plugin's message for
// this pod), then its gang's, then what the gang's phase says.
func podReason(p *corev1.Pod, g *podGroup) (string, string) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && (c.Message != "" || c.Reason != "") {
			return joinReason(c.Reason, c.Message), FromPod
		}
	}
	if g == nil {
		return noReasonYet, FromNothing
	}
	if r := g.unschedulable(); r != "" {
		return r, FromPodGroup
	}
	switch g.Status.Phase {
	case "Pending":
		return notAdmitted, FromPhase
	case "Inqueue":
		return admittedState, FromPhase
	}
	return noReasonYet, FromNothing
}

func joinReason(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}

// asks says a request in words, one part per container: "2 × 10240 MiB, 30% cores".
func asks(cs []api.ContainerRequest) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		mem := fmt.Sprintf("%d MiB", c.MemoryMiB)
		switch {
		case c.MemoryMiB == 0 && c.MemoryPercent > 0:
			mem = fmt.Sprintf("%d%% memory", c.MemoryPercent)
		case c.MemoryMiB == 0:
			mem = "whole memory"
		}
		parts = append(parts, fmt.Sprintf("%s: %d × %s, %d%% cores", c.Name, c.Cards, mem, c.Cores))
	}
	return strings.Join(parts, "; ")
}

func stamp(t metav1.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
