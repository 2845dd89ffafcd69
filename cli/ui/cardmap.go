package ui

import (
	"github.com/tessera-gpu/tessera/cli"
)

// CardMap is the report's card map in the page's own JSON: the page reads these
// names, so a change to the CLI's output formats cannot break it unnoticed (a renamed
// field of cli's types fails to compile here instead).
type CardMap struct {
	Nodes  []Node   `json:"nodes"`
	Legend []Colour `json:"legend"`
	Totals Totals   `json:"totals"`
}

// Colour is a queue's colour on the page, the same as in `tessera report`.
type Colour struct {
	Queue  string `json:"queue"`
	Colour string `json:"colour"`
}

// Totals sum the cluster's cards.
type Totals struct {
	Nodes          int   `json:"nodes"`
	Cards          int   `json:"cards"`
	BusyCards      int   `json:"busyCards"`
	UnhealthyCards int   `json:"unhealthyCards"`
	CapacityMiB    int64 `json:"capacityMiB"`
	UsedMiB        int64 `json:"usedMiB"`
	MemoryPercent  int   `json:"memoryPercent"`
	CoresPercent   int   `json:"coresPercent"`
}

// Node is one node: its cards, or why it has none the scheduler can use.
type Node struct {
	Name      string   `json:"name"`
	Status    string   `json:"status"`
	Reason    string   `json:"reason,omitempty"`
	Source    string   `json:"source,omitempty"`
	Heartbeat string   `json:"heartbeat,omitempty"`
	Cards     []Card   `json:"cards"`
	Problems  []string `json:"problems,omitempty"`
}

// Card is one card with what is booked on it.
type Card struct {
	Index         int      `json:"index"`
	UUID          string   `json:"uuid"`
	Model         string   `json:"model"`
	MemoryMiB     int64    `json:"memoryMiB"`
	CapacityMiB   int64    `json:"capacityMiB"`
	UsedMemoryMiB int64    `json:"usedMemoryMiB"`
	UsedCores     int      `json:"usedCores"`
	Tenants       int      `json:"tenants"`
	Shares        int      `json:"shares"`
	QoS           string   `json:"qos"`
	Healthy       bool     `json:"healthy"`
	MIG           bool     `json:"mig"`
	Pods          []Tenant `json:"pods"`
	// Cordon is set when an administrator cordoned the card (kubectl tessera cordon): it
	// takes no new vGPU task.
	Cordon *Cordon `json:"cordon,omitempty"`
}

// Cordon is a card's cordon: the administrator's reason and since when (RFC 3339).
type Cordon struct {
	Reason string `json:"reason"`
	Since  string `json:"since"`
}

// Tenant is one container's share of a card.
type Tenant struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Queue     string `json:"queue"`
	QoS       string `json:"qos"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
}

func cardMap(r *cli.Report) CardMap {
	t := r.Totals
	m := CardMap{Nodes: make([]Node, 0, len(r.Nodes)), Legend: make([]Colour, 0, len(r.Queues)), Totals: Totals{
		Nodes: t.Nodes, Cards: t.Cards, BusyCards: t.BusyCards, UnhealthyCards: t.UnhealthyCards, CapacityMiB: t.CapacityMiB,
		UsedMiB: t.UsedMiB, MemoryPercent: t.MemoryPercent, CoresPercent: t.CoresPercent}}
	for _, q := range r.Queues {
		m.Legend = append(m.Legend, Colour{Queue: q.Queue, Colour: q.Colour})
	}
	for _, n := range r.Nodes {
		node := Node{Name: n.Name, Status: n.Status, Reason: n.Reason, Source: n.Source, Heartbeat: n.Heartbeat,
			Cards: make([]Card, 0, len(n.Cards)), Problems: n.Problems}
		for _, c := range n.Cards {
			card := Card{Index: c.Index, UUID: c.UUID, Model: c.Model, MemoryMiB: c.MemoryMiB, CapacityMiB: c.CapacityMiB,
				UsedMemoryMiB: c.UsedMemoryMiB, UsedCores: c.UsedCores, Tenants: c.Tenants, Shares: c.Shares, QoS: c.QoS,
				Healthy: c.Healthy, MIG: c.MIG, Pods: make([]Tenant, 0, len(c.Pods))}
			if c.Cordon != nil {
				card.Cordon = &Cordon{Reason: c.Cordon.Reason, Since: c.Cordon.Since}
			}
			for _, p := range c.Pods {
				card.Pods = append(card.Pods, Tenant{Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, Queue: p.Queue,
					QoS: string(p.QoS), MemoryMiB: p.MemoryMiB, Cores: p.Cores})
			}
			node.Cards = append(node.Cards, card)
		}
		m.Nodes = append(m.Nodes, node)
	}
	return m
}
