package cli

import (
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// Node status values.
const (
	StatusReady       = "ready"        // inventory usable: the scheduler places vGPU tasks here
	StatusUnusable    = "unusable"     // inventory malformed or heartbeat stale: no vGPU tasks
	StatusNoInventory = "no-inventory" // no vGPU cards published
)

// NodeView is one node in `tessera nodes` and the report.
type NodeView struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Reason explains an unusable node in the scheduler's words.
	Reason string `json:"reason,omitempty"`
	// Source is where the cards were read from: tessera or hami.
	Source string `json:"source,omitempty"`
	// CardAPI is how the node's agent offers its cards to the kubelet, as it says in
	// tessera.io/card-api: "dra" (DRA devices of driver vgpu.tessera.io, allocated by
	// Kubernetes' allocator) or "device-plugin"; absent where the agent does not say
	// (agents before the annotation, HAMi's device plugin): a device plugin. Added within
	// cli.tessera.io/v1.
	CardAPI string `json:"cardAPI,omitempty"`
	// ClaimsUnknown says why the ResourceClaims could not be read, on a node that serves
	// DRA devices: its cards' claimed memory and cores are then unknown, not zero. Added
	// within cli.tessera.io/v1.
	ClaimsUnknown string     `json:"claimsUnknown,omitempty"`
	Heartbeat     string     `json:"heartbeat,omitempty"`
	Cards         []CardView `json:"cards"`
	// Problems are pods whose cards the scheduler cannot account.
	Problems []string `json:"problems,omitempty"`
}

// CardView is one card with what is booked on it.
type CardView struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// MemoryMiB is physical memory; CapacityMiB the schedulable memory (× oversubscription).
	MemoryMiB     int64 `json:"memoryMiB"`
	CapacityMiB   int64 `json:"capacityMiB"`
	UsedMemoryMiB int64 `json:"usedMemoryMiB"`
	UsedCores     int   `json:"usedCores"`
	Tenants       int   `json:"tenants"`
	Shares        int   `json:"shares"`
	// QoS is the card's pool: the class of its shared tenants, "exclusive" for a
	// 100%-cores tenant, "" when idle.
	QoS     string   `json:"qos"`
	Healthy bool     `json:"healthy"`
	MIG     bool     `json:"mig,omitempty"`
	NUMA    int      `json:"numa"`
	Pods    []Tenant `json:"pods"`
	// Cordon is set when an administrator has cordoned the card: it takes no new
	// vGPU task (added within cli.tessera.io/v1; absent otherwise).
	Cordon *CordonView `json:"cordon,omitempty"`
	// MIGInstances are the instances of a card in MIG mode, in the agent's order;
	// MIGLayout says why a card in MIG mode has none to hand out (the layout
	// annotation is absent or unreadable). Both added within cli.tessera.io/v1.
	MIGInstances []MIGInstanceView `json:"migInstances,omitempty"`
	MIGLayout    string            `json:"migLayout,omitempty"`
	// Claims are the ResourceClaims allocated a share of the card (DRA nodes); their
	// memory and cores are in UsedMemoryMiB and UsedCores, each is one of Tenants, and
	// the pods they are reserved for are in Pods. Added within cli.tessera.io/v1.
	Claims []ClaimOnCard `json:"claims,omitempty"`
}

// MIGInstanceView is one MIG instance and the pods that hold it (one, or none when
// it is free; more only when pods were found sharing it).
type MIGInstanceView struct {
	UUID      string   `json:"uuid"`
	Profile   string   `json:"profile"`
	MemoryMiB int64    `json:"memoryMiB"`
	Pods      []Tenant `json:"pods"`
}

// CordonView is a card's cordon: the administrator's reason and since when (RFC 3339).
type CordonView struct {
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
}

// Nodes computes the per-node, per-card view.
func (s *Snapshot) NodesView() []NodeView {
	var out []NodeView
	for _, st := range s.nodeStates() {
		v := NodeView{Name: st.node.Name, Source: st.source, Heartbeat: st.node.Annotations[api.AnnotationHeartbeat],
			Problems: st.problems, Cards: []CardView{}, CardAPI: st.node.Annotations[api.AnnotationCardAPI]}
		dra := servesDRA(st.node)
		if dra && s.ClaimsUnread != "" {
			v.ClaimsUnknown = s.ClaimsUnread
		}
		switch {
		case st.err != nil:
			v.Status, v.Reason = StatusUnusable, st.err.Error()
		case st.engine == nil:
			v.Status = StatusNoInventory
		default:
			v.Status = StatusReady
			for i := range st.engine.Cards {
				c := cardView(&st.engine.Cards[i], st.tenants[st.engine.Cards[i].UUID])
				if c.MIG && st.engine.Cards[i].MIGInstances == nil {
					c.MIGLayout = "the node agent published no layout for this card"
					if err := api.MIGLayoutError(st.node); err != nil {
						c.MIGLayout = err.Error()
					}
				}
				v.Cards = append(v.Cards, c)
			}
			if dra {
				// As its ResourceSlice publishes it: no oversubscription.
				for i := range v.Cards {
					v.Cards[i].CapacityMiB = v.Cards[i].MemoryMiB
				}
			}
			if v.ClaimsUnknown == "" {
				s.addClaims(&v)
			}
		}
		out = append(out, v)
	}
	return out
}

func cardView(c *placement.CardState, tenants []Tenant) CardView {
	v := CardView{Index: c.Index, UUID: c.UUID, Model: c.Model, MemoryMiB: c.MemoryMiB, CapacityMiB: c.CapacityMiB,
		UsedMemoryMiB: c.Used.MemoryMiB, UsedCores: c.Used.Cores, Tenants: c.Used.Tenants, Shares: c.Shares,
		Healthy: c.Healthy, MIG: c.MIG, NUMA: c.NUMA, Pods: tenants}
	if v.Pods == nil {
		v.Pods = []Tenant{}
	}
	if c.Cordon != nil {
		v.Cordon = &CordonView{Reason: c.Cordon.Reason, Since: c.Cordon.Since.UTC().Format(time.RFC3339)}
	}
	if c.MIG {
		// Instances are held whole: the card has no shared pool.
		for _, in := range c.MIGInstances {
			iv := MIGInstanceView{UUID: in.UUID, Profile: in.Profile, MemoryMiB: in.MemoryMiB, Pods: []Tenant{}}
			for _, t := range tenants {
				if t.MIG == in.UUID {
					iv.Pods = append(iv.Pods, t)
				}
			}
			v.MIGInstances = append(v.MIGInstances, iv)
		}
		return v
	}
	v.QoS = poolQoS(tenants)
	return v
}

// poolQoS is the pool of a card's tenants: "exclusive" for a 100%-cores tenant, their
// class when they share one, "mixed" when not, "" without tenants.
func poolQoS(tenants []Tenant) string {
	for _, t := range tenants {
		if t.Cores == 100 {
			return "exclusive"
		}
	}
	if len(tenants) == 0 {
		return ""
	}
	qos := string(tenants[0].QoS)
	for _, t := range tenants[1:] {
		if string(t.QoS) != qos {
			return "mixed"
		}
	}
	return qos
}

func podList(ts []Tenant) string {
	if len(ts) == 0 {
		return "-"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Namespace + "/" + t.Pod
	}
	return strings.Join(parts, ",")
}
