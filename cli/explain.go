package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// Explain status values.
const (
	ExplainNoVGPU     = "no-vgpu"      // the pod requests no vGPU resources: the plugin lets it pass
	ExplainInvalid    = "invalid"      // the request or an annotation is malformed: no node can take it
	ExplainPlaced     = "placed"       // the pod is bound already
	ExplainFits       = "fits"         // at least one node's cards can take it now
	ExplainNoNodeFits = "no-node-fits" // no node's cards can take it now
	// ExplainDRA: the pod's cards come from ResourceClaims of Tessera's DRA driver, which
	// Kubernetes' allocator places (added within cli.tessera.io/v1).
	ExplainDRA = "dra"
)

// ExplainView is the vgpu plugin's verdict on a pod, node by node.
type ExplainView struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Status    string `json:"status"`
	// Reason is set for no-vgpu, invalid and placed.
	Reason     string        `json:"reason,omitempty"`
	Containers []RequestView `json:"containers,omitempty"`
	Options    *OptionsView  `json:"options,omitempty"`
	NodePolicy api.Policy    `json:"nodePolicy,omitempty"`
	CardPolicy api.Policy    `json:"cardPolicy,omitempty"`
	Nodes      []NodeFit     `json:"nodes,omitempty"`
	// Scheduler is the message of the pod's PodScheduled condition, as Volcano wrote it.
	Scheduler string `json:"scheduler,omitempty"`
	// Queue is the pod's queue's card share (absent without Volcano's queues).
	Queue *QueueView `json:"queue,omitempty"`
	// ConfSource is where the scheduler's conf was read from ("ConfigMap NS/NAME" or
	// "file PATH"); empty when the vgpu plugin's defaults were used.
	ConfSource string `json:"confSource,omitempty"`
	// ConfFindings: what in the scheduler's conf keeps the vgpu plugin from placing
	// or reclaiming for it, or queues from taking their cards back.
	ConfFindings []string `json:"confFindings,omitempty"`
	// Claims are the pod's ResourceClaims of Tessera's DRA devices and their allocations;
	// ClaimsUnknown says why they could not be read. Both added within cli.tessera.io/v1.
	Claims        []PodClaimView `json:"claims,omitempty"`
	ClaimsUnknown string         `json:"claimsUnknown,omitempty"`
}

// draReason is explain's word on a pod whose cards come from claims.
const draReason = "the pod's cards come from ResourceClaims of DRA driver " + DRADriver + ": its node and card are chosen by " +
	"Kubernetes' DRA allocator in Volcano's predicates plugin, not by the vgpu plugin, so no node-by-node verdict is given here"

// RequestView is one container's vGPU request.
type RequestView struct {
	Name  string `json:"name"`
	Cards int    `json:"cards"`
	// MemoryMiB per card; zero when MemoryPercent is used instead.
	MemoryMiB     int64 `json:"memoryMiB,omitempty"`
	MemoryPercent int   `json:"memoryPercent,omitempty"`
	Cores         int   `json:"cores"`
	// MIGProfile is set when the container asks for Cards whole MIG instances of it.
	MIGProfile string `json:"migProfile,omitempty"`
}

// OptionsView is what the pod's annotations ask of its cards.
type OptionsView struct {
	TypeInclude []string     `json:"typeInclude,omitempty"`
	TypeExclude []string     `json:"typeExclude,omitempty"`
	UUIDInclude []string     `json:"uuidInclude,omitempty"`
	UUIDExclude []string     `json:"uuidExclude,omitempty"`
	NUMABind    bool         `json:"numaBind,omitempty"`
	QoS         api.QoSClass `json:"qos,omitempty"`
	// ScoreWeights are the pod's own weights of the score's terms (tessera.io/score-weights),
	// e.g. "policy=3,topology=1"; empty when the pod leaves the plugin's.
	ScoreWeights string `json:"scoreWeights,omitempty"`
}

// RejectView is one card's refusal.
type RejectView struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid"`
	Reason string `json:"reason"`
	// Detail names the limit that failed, e.g. "30% wanted, 20% free".
	Detail string `json:"detail,omitempty"`
	// Message is the whole refusal in the scheduler's words.
	Message string `json:"message"`
}

func (r RejectView) String() string { return r.Message }

func requestViews(cs []api.ContainerRequest) []RequestView {
	out := make([]RequestView, len(cs))
	for i, c := range cs {
		out[i] = RequestView{Name: c.Name, Cards: c.Cards, MemoryMiB: c.MemoryMiB, MemoryPercent: c.MemoryPercent, Cores: c.Cores,
			MIGProfile: c.MIGProfile}
	}
	return out
}

func rejectViews(rs []placement.CardReject) []RejectView {
	out := make([]RejectView, len(rs))
	for i, r := range rs {
		out[i] = RejectView{Index: r.Index, UUID: r.UUID, Reason: string(r.Reason), Detail: r.Detail, Message: r.String()}
	}
	return out
}

// NodeFit is one node's answer.
type NodeFit struct {
	Node string `json:"node"`
	Fits bool   `json:"fits"`
	// Score is the node's 0..100 vgpu score when the pod fits (the scheduler multiplies it by vgpu.Weight).
	Score float64 `json:"score,omitempty"`
	// Cards are the cards the pod would get, per container, when it fits.
	Cards []api.ContainerAssignment `json:"cards,omitempty"`
	// Reason is the predicate's message, word for word.
	Reason string `json:"reason,omitempty"`
	// Resolvable: the refusal depends on other tenants, so waiting or preemption may help.
	Resolvable bool         `json:"resolvable,omitempty"`
	Rejects    []RejectView `json:"rejects,omitempty"`
}

// Explain runs the vgpu plugin's predicate for the pod on every node of the
// snapshot: the same request parsing, inventory rules, usage accounting and placement maths.
func (s *Snapshot) Explain(pod *corev1.Pod) *ExplainView {
	v := &ExplainView{Namespace: pod.Namespace, Pod: pod.Name}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			v.Scheduler = strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	v.Claims = s.podClaims(pod)
	v.ClaimsUnknown = s.podClaimsUnknown(pod)
	if !s.Args.Resources.HasVGPURequest(pod) && (len(v.Claims) > 0 || v.ClaimsUnknown != "") {
		v.Status, v.Reason = ExplainDRA, draReason
		return v
	}
	if !s.Args.Resources.HasVGPURequest(pod) {
		v.Status, v.Reason = ExplainNoVGPU, "the pod requests no vGPU resources ("+string(s.Args.Resources.Number)+", ...): the vgpu plugin does not filter it"
		return v
	}
	if pod.Spec.NodeName != "" {
		v.Status, v.Reason = ExplainPlaced, "bound to node "+pod.Spec.NodeName+"; see `tessera pod "+pod.Name+"`"
		return v
	}
	req, err := s.request(pod)
	if err != nil {
		v.Status, v.Reason = ExplainInvalid, "vgpu: "+err.Error()
		return v
	}
	o := req.Options
	v.Containers, v.NodePolicy, v.CardPolicy = requestViews(req.Containers), req.NodePolicy, req.CardPolicy
	v.Options = &OptionsView{TypeInclude: o.TypeInclude, TypeExclude: o.TypeExclude, UUIDInclude: o.UUIDInclude,
		UUIDExclude: o.UUIDExclude, NUMABind: o.NUMABind, QoS: o.QoS, ScoreWeights: o.Weights.String()}
	if s.Args.QueueShare {
		v.Queue = s.queueViews()[Queue(pod)]
	}
	for _, st := range s.nodeStates() {
		f := NodeFit{Node: st.node.Name}
		switch {
		case st.err != nil:
			f.Reason = "vgpu: " + st.err.Error()
		case st.engine == nil:
			f.Reason = "vgpu: node has no vGPU inventory"
		default:
			fit, ferr := placement.FitPod(st.engine, req)
			if ferr != nil {
				f.Reason, f.Resolvable, f.Rejects = "vgpu: "+ferr.Error(), ferr.Resolvable(), rejectViews(ferr.Explained())
				migLayoutDetail(f.Rejects, st.node)
			} else {
				f.Fits, f.Score, f.Cards = true, fit.Score, fit.Containers
			}
		}
		v.Nodes = append(v.Nodes, f)
	}
	// Best first: fitting nodes by score, then refusals that may clear, then the rest.
	sort.SliceStable(v.Nodes, func(i, j int) bool {
		a, b := v.Nodes[i], v.Nodes[j]
		if a.Fits != b.Fits {
			return a.Fits
		}
		if a.Fits {
			return a.Score > b.Score
		}
		return a.Resolvable && !b.Resolvable
	})
	v.Status = ExplainNoNodeFits
	if len(v.Nodes) > 0 && v.Nodes[0].Fits {
		v.Status = ExplainFits
	}
	return v
}

// migLayoutDetail gives a card refused for an unknown MIG layout the reason the
// node's layout annotation cannot be read, where the engine only knows it is missing.
func migLayoutDetail(rs []RejectView, node *corev1.Node) {
	for i := range rs {
		if rs[i].Reason != string(placement.ReasonMIGLayout) {
			continue
		}
		if err := api.MIGLayoutError(node); err != nil {
			rs[i].Detail = err.Error()
			rs[i].Message = fmt.Sprintf("card %d (%s): %s: %s", rs[i].Index, rs[i].UUID, rs[i].Reason, rs[i].Detail)
		}
	}
}

// request parses the pod's demand with the plugin's own parser.
func (s *Snapshot) request(pod *corev1.Pod) (*placement.Request, error) {
	return s.Args.Request(pod)
}

// WriteExplain prints the verdict for people.
func WriteExplain(w io.Writer, v *ExplainView) error {
	fmt.Fprintf(w, "Pod %s/%s: %s\n", v.Namespace, v.Pod, v.Status)
	if v.Reason != "" {
		fmt.Fprintf(w, "  %s\n", v.Reason)
	}
	if v.Scheduler != "" {
		fmt.Fprintf(w, "  scheduler's last word: %s\n", v.Scheduler)
	}
	if v.ClaimsUnknown != "" {
		fmt.Fprintf(w, "  claims: unknown: %s\n", v.ClaimsUnknown)
	}
	writeClaims(w, "  ", v.Claims)
	if len(v.Containers) > 0 {
		for _, c := range v.Containers {
			if c.MIGProfile != "" {
				fmt.Fprintf(w, "  container %q asks for %d whole MIG instance(s) of profile %s (%s)\n", c.Name, c.Cards, c.MIGProfile,
					api.AnnotationMIGProfile)
				continue
			}
			mem := fmt.Sprintf("%d MiB", c.MemoryMiB)
			if c.MemoryMiB == 0 {
				mem = fmt.Sprintf("%d%% of memory", c.MemoryPercent)
			}
			fmt.Fprintf(w, "  container %q asks for %d card(s), each %s and %d%% cores\n", c.Name, c.Cards, mem, c.Cores)
		}
		fmt.Fprintf(w, "  policies: node %s, card %s; qos %s\n", v.NodePolicy, v.CardPolicy, v.Options.QoS)
		if v.Options.ScoreWeights != "" {
			fmt.Fprintf(w, "  score weights: %s (%s; terms it leaves out keep the plugin's)\n", v.Options.ScoreWeights, api.AnnotationScoreWeights)
		}
	}
	if v.Queue != nil {
		writeQueue(w, v.Queue)
	}
	if v.ConfSource != "" {
		fmt.Fprintf(w, "  scheduler conf: read from %s\n", v.ConfSource)
	}
	for _, f := range v.ConfFindings {
		fmt.Fprintf(w, "  scheduler conf: %s\n", f)
	}
	fitting := 0
	for _, n := range v.Nodes {
		if n.Fits {
			fitting++
		}
	}
	if len(v.Nodes) > 0 {
		fmt.Fprintf(w, "  %d of %d nodes can take its vGPU request now (other predicates such as CPU, taints and affinity are not evaluated here)\n", fitting, len(v.Nodes))
	}
	for _, n := range v.Nodes {
		if n.Fits {
			var cards []string
			for _, c := range n.Cards {
				for _, a := range c.Cards {
					if a.IsMIG() {
						cards = append(cards, fmt.Sprintf("%s:%s/%s", c.Name, a.UUID, a.MIG))
						continue
					}
					cards = append(cards, fmt.Sprintf("%s:%s", c.Name, a.UUID))
				}
			}
			fmt.Fprintf(w, "  + %s fits (score %.1f), cards %s\n", n.Node, n.Score, strings.Join(cards, " "))
			continue
		}
		mark := "-"
		if n.Resolvable {
			mark = "~"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", mark, n.Node, n.Reason)
		for _, r := range n.Rejects {
			fmt.Fprintf(w, "      %s\n", r)
		}
	}
	if fitting == 0 && len(v.Nodes) > 0 {
		fmt.Fprintln(w, "  (~ may clear as other tenants finish or are preempted; - will not without a change to the node or the pod)")
	}
	return nil
}
