package cli

import (
	_ "embed"
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"sort"
	"strings"
	"time"
)

//go:embed report.html.tmpl
var reportTemplate string

var reportTmpl = template.Must(template.New("report").Parse(reportTemplate))

// Report is the data behind the HTML card map.
type Report struct {
	Generated string        `json:"generated"`
	Nodes     []NodeView    `json:"nodes"`
	Queues    []QueueColour `json:"queues"`
	Totals    ReportTotals  `json:"totals"`
}

// QueueColour is one legend entry.
type QueueColour struct {
	Queue  string `json:"queue"`
	Colour string `json:"colour"`
}

// ReportTotals sums the cluster's cards.
type ReportTotals struct {
	Nodes          int `json:"nodes"`
	Cards          int `json:"cards"`
	BusyCards      int `json:"busyCards"`
	UnhealthyCards int `json:"unhealthyCards"`
	// CordonedCards counts the cards an administrator has cordoned (added within
	// cli.tessera.io/v1).
	CordonedCards int   `json:"cordonedCards"`
	CapacityMiB   int64 `json:"capacityMiB"`
	UsedMiB       int64 `json:"usedMiB"`
	// MemoryPercent and CoresPercent are cluster-wide fill, 0..100.
	MemoryPercent int `json:"memoryPercent"`
	CoresPercent  int `json:"coresPercent"`
}

// CSS is the legend swatch's colour, for the template.
func (q QueueColour) CSS() template.CSS { return template.CSS(q.Colour) }

// BuildReport turns the nodes view into the report's data.
func BuildReport(nodes []NodeView, now time.Time) *Report {
	r := &Report{Generated: now.UTC().Format(time.RFC3339), Nodes: nodes}
	queues := map[string]bool{}
	var cores, cards int
	for _, n := range nodes {
		r.Totals.Nodes++
		for _, c := range n.Cards {
			cards++
			r.Totals.CapacityMiB += c.CapacityMiB
			r.Totals.UsedMiB += c.UsedMemoryMiB
			cores += c.UsedCores
			if c.Tenants > 0 {
				r.Totals.BusyCards++
			}
			if !c.Healthy {
				r.Totals.UnhealthyCards++
			}
			if c.Cordon != nil {
				r.Totals.CordonedCards++
			}
			for _, p := range c.Pods {
				queues[queueName(p.Queue)] = true
			}
		}
	}
	r.Totals.Cards = cards
	if r.Totals.CapacityMiB > 0 {
		r.Totals.MemoryPercent = int(100 * r.Totals.UsedMiB / r.Totals.CapacityMiB)
	}
	if cards > 0 {
		r.Totals.CoresPercent = cores / cards
	}
	for q := range queues {
		r.Queues = append(r.Queues, QueueColour{Queue: q, Colour: QueueColourOf(q)})
	}
	sort.Slice(r.Queues, func(i, j int) bool { return r.Queues[i].Queue < r.Queues[j].Queue })
	return r
}

func queueName(q string) string {
	if q == "" {
		return "(no queue)"
	}
	return q
}

// QueueColourOf gives each queue a stable, saturated colour, so the same queue has
// the same colour in every report.
func QueueColourOf(q string) string {
	h := fnv.New32a()
	h.Write([]byte(queueName(q)))
	return fmt.Sprintf("hsl(%d, 65%%, 48%%)", h.Sum32()%360)
}

// segment is one tenant's slice of a card's memory or cores bar.
type segment struct {
	Percent float64
	Colour  string
	Label   string
}

// Style is the segment's inline CSS; built here from numbers and our own colours only.
func (s segment) Style() template.CSS {
	return template.CSS(fmt.Sprintf("width:%.2f%%;background:%s", s.Percent, s.Colour))
}

func tenantLabel(p Tenant) string {
	return fmt.Sprintf("%s/%s [%s] queue %s, %s: %d MiB, %d%% cores", p.Namespace, p.Pod, p.Container,
		queueName(p.Queue), p.QoS, p.MemoryMiB, p.Cores)
}

func segments(c CardView, memory bool) []segment {
	var out []segment
	for _, p := range c.Pods {
		var pct float64
		if memory {
			if c.CapacityMiB > 0 {
				pct = 100 * float64(p.MemoryMiB) / float64(c.CapacityMiB)
			}
		} else {
			pct = float64(p.Cores)
		}
		out = append(out, segment{Percent: min(pct, 100), Colour: QueueColourOf(p.Queue), Label: tenantLabel(p)})
	}
	return out
}

func hover(n NodeView, c CardView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s card %d  %s\n%s\nmemory %d/%d MiB, cores %d%%, tenants %d/%d", n.Name, c.Index, c.Model, c.UUID,
		c.UsedMemoryMiB, c.CapacityMiB, c.UsedCores, c.Tenants, c.Shares)
	if !c.Healthy {
		b.WriteString("\nUNHEALTHY: takes no new tasks")
	}
	if len(c.Pods) == 0 {
		b.WriteString("\nidle")
	}
	for _, p := range c.Pods {
		b.WriteString("\n" + tenantLabel(p))
	}
	return b.String()
}

// WriteReport writes the self-contained HTML page: no scripts or styles from
// elsewhere, so it can be mailed or attached to a ticket.
func WriteReport(w io.Writer, r *Report) error {
	type tile struct {
		Node         NodeView
		Card         CardView
		Memory       []segment
		Cores        []segment
		Hover        string
		MemPct, CPct int
		Tint         template.CSS
	}
	type node struct {
		View  NodeView
		Tiles []tile
	}
	var nodes []node
	for _, n := range r.Nodes {
		nd := node{View: n}
		for _, c := range n.Cards {
			t := tile{Node: n, Card: c, Memory: segments(c, true), Cores: segments(c, false), Hover: hover(n, c), CPct: c.UsedCores}
			if c.CapacityMiB > 0 {
				t.MemPct = int(100 * c.UsedMemoryMiB / c.CapacityMiB)
			}
			t.Tint = "border-top-color:#c5ccd6"
			if len(c.Pods) > 0 {
				t.Tint = template.CSS("border-top-color:" + QueueColourOf(dominantQueue(c)))
			}
			nd.Tiles = append(nd.Tiles, t)
		}
		nodes = append(nodes, nd)
	}
	return reportTmpl.Execute(w, map[string]any{"R": r, "Nodes": nodes})
}

// dominantQueue is the queue holding most of the card's memory.
func dominantQueue(c CardView) string {
	by := map[string]int64{}
	best, bestMiB := "", int64(-1)
	for _, p := range c.Pods {
		by[p.Queue] += p.MemoryMiB
	}
	keys := make([]string, 0, len(by))
	for q := range by {
		keys = append(keys, q)
	}
	sort.Strings(keys)
	for _, q := range keys {
		if by[q] > bestMiB {
			best, bestMiB = q, by[q]
		}
	}
	return best
}
