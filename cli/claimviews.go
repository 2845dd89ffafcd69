package cli

import (
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// ClaimOnCard is one ResourceClaim's share of a card in the nodes view.
type ClaimOnCard struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Request   string `json:"request"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	Whole     bool   `json:"whole,omitempty"`
	// Pods are the pods the claim is reserved for, in its namespace.
	Pods []string `json:"pods,omitempty"`
}

// PodClaimView is one of a pod's ResourceClaims that asks for or holds Tessera cards.
type PodClaimView struct {
	// Name is the pod's name for the claim (spec.resourceClaims[].name).
	Name string `json:"name"`
	// Claim is the ResourceClaim's name; Template the template it was made from.
	Claim      string       `json:"claim"`
	Template   string       `json:"template,omitempty"`
	Containers []string     `json:"containers,omitempty"`
	Allocated  bool         `json:"allocated"`
	Shares     []ClaimShare `json:"shares,omitempty"`
	Problems   []string     `json:"problems,omitempty"`
}

// resolveClaims fills in each share's card from its node's inventory: UUID, model, and
// for a whole card its memory.
func (s *Snapshot) resolveClaims() {
	cards := map[string]map[int]api.Card{}
	for i := range s.Nodes {
		inv, _, err := nodeInventory(&s.Nodes[i], s.Now, 0)
		if err != nil || inv == nil {
			continue
		}
		m := map[int]api.Card{}
		for _, c := range inv.Cards {
			m[c.Index] = c
		}
		cards[s.Nodes[i].Name] = m
	}
	for i := range s.Claims {
		for j := range s.Claims[i].Shares {
			sh := &s.Claims[i].Shares[j]
			c, ok := cards[sh.Node][sh.Index]
			if !ok {
				continue
			}
			sh.UUID, sh.Model = c.UUID, c.Model
			if sh.Whole {
				sh.MemoryMiB = c.MemoryMiB
			}
		}
	}
}

// addClaims books the claims allocated on node v onto its cards: memory, cores, one
// tenant per claim, and the pods the claims are reserved for.
func (s *Snapshot) addClaims(v *NodeView) {
	byIndex := map[int]*CardView{}
	for i := range v.Cards {
		if !v.Cards[i].MIG {
			byIndex[v.Cards[i].Index] = &v.Cards[i]
		}
	}
	touched := map[*CardView]bool{}
	for _, cl := range s.Claims {
		for _, sh := range cl.Shares {
			if sh.Node != v.Name {
				continue
			}
			c := byIndex[sh.Index]
			if c == nil {
				v.Problems = append(v.Problems, fmt.Sprintf("claim %s/%s: device %s is no card of the node's inventory; its share is not accounted",
					cl.Namespace, cl.Name, sh.Device))
				continue
			}
			c.UsedMemoryMiB += sh.MemoryMiB
			c.UsedCores += sh.Cores
			c.Tenants++
			c.Claims = append(c.Claims, ClaimOnCard{Namespace: cl.Namespace, Name: cl.Name, Request: sh.Request,
				MemoryMiB: sh.MemoryMiB, Cores: sh.Cores, Whole: sh.Whole, Pods: cl.Pods})
			for _, p := range cl.Pods {
				c.Pods = append(c.Pods, Tenant{Namespace: cl.Namespace, Pod: p, QoS: api.DefaultQoS, MemoryMiB: sh.MemoryMiB,
					Cores: sh.Cores, Claim: cl.Name})
			}
			touched[c] = true
		}
		for _, p := range cl.Problems {
			if s.claimOnNode(cl, v.Name) {
				v.Problems = append(v.Problems, fmt.Sprintf("claim %s/%s: %s", cl.Namespace, cl.Name, p))
			}
		}
	}
	for c := range touched {
		// Every claim gets the default class (docs/dra.md); a 100-core claim has the
		// card to itself.
		ts := append([]Tenant(nil), c.Pods...)
		for _, cl := range c.Claims {
			ts = append(ts, Tenant{QoS: api.DefaultQoS, Cores: cl.Cores})
		}
		c.QoS = poolQoS(ts)
	}
}

// claimOnNode: the claim's allocation names the node (its node selector's hostname or
// one of its shares' pools).
func (s *Snapshot) claimOnNode(cl ClaimView, node string) bool {
	for _, sh := range cl.Shares {
		if sh.Node == node {
			return true
		}
	}
	return cl.Node == node
}

// podClaims are the pod's ResourceClaims that ask for or hold Tessera cards.
func (s *Snapshot) podClaims(pod *corev1.Pod) []PodClaimView {
	var out []PodClaimView
	for _, ref := range claimNames(pod) {
		for _, cl := range s.Claims {
			if cl.Namespace != pod.Namespace || cl.Name != ref.Claim || ref.Claim == "" {
				continue
			}
			out = append(out, PodClaimView{Name: ref.Name, Claim: cl.Name, Template: ref.Template, Containers: ref.Containers,
				Allocated: cl.Allocated, Shares: cl.Shares, Problems: cl.Problems})
		}
	}
	return out
}

// claimsNextStep is what to look at next for a pod whose cards come from claims.
func claimsNextStep(v *PodView) string {
	if v.ClaimsUnknown != "" {
		return "the pod references ResourceClaims, which could not be read: " + v.ClaimsUnknown
	}
	for _, c := range v.Claims {
		if !c.Allocated {
			return "claim " + c.Claim + " is not allocated yet: Kubernetes' DRA allocator in Volcano's predicates picks its card; run `tessera explain " +
				v.Name + " -n " + v.Namespace + "`"
		}
	}
	if v.Phase == string(corev1.PodPending) {
		return "Kubernetes' DRA allocator gave its claims these cards; the node agent prepares them when the kubelet starts the pod"
	}
	return "Kubernetes' DRA allocator gave its claims these cards and the node agent prepared them for the kubelet"
}

// writePodClaims prints a pod's claims for people, one line per claim and one per card.
func writePodClaims(w io.Writer, v *PodView) {
	if v.ClaimsUnknown != "" {
		fmt.Fprintf(w, "Claims:     unknown: %s\n", v.ClaimsUnknown)
	}
	if len(v.Claims) == 0 {
		return
	}
	fmt.Fprintf(w, "Claims:     %d of driver %s (Kubernetes' DRA allocator)\n", len(v.Claims), DRADriver)
	writeClaims(w, "  ", v.Claims)
}

// writeClaims prints each claim, its allocation and its problems, indented.
func writeClaims(w io.Writer, indent string, claims []PodClaimView) {
	for _, c := range claims {
		state := "not allocated yet"
		if c.Allocated {
			state = "allocated"
		}
		ctrs := ""
		if len(c.Containers) > 0 {
			ctrs = ", containers " + strings.Join(c.Containers, ",")
		}
		fmt.Fprintf(w, "%sclaim %s (%s%s): %s\n", indent, c.Name, c.Claim, ctrs, state)
		for _, sh := range c.Shares {
			whole := ""
			if sh.Whole {
				whole = ", the whole card"
			}
			fmt.Fprintf(w, "%s  card %d %s %s on %s: %d MiB, %d%% cores%s\n", indent, sh.Index, dash(sh.UUID), dash(sh.Model), sh.Node,
				sh.MemoryMiB, sh.Cores, whole)
		}
		for _, p := range c.Problems {
			fmt.Fprintf(w, "%s  problem: %s\n", indent, p)
		}
	}
}
