package sim

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
)

// CardUse is one card after the simulation.
type CardUse struct {
	Node      string   `json:"node"`
	Index     int      `json:"index"`
	UUID      string   `json:"uuid"`
	Model     string   `json:"model"`
	Healthy   bool     `json:"healthy"`
	MemoryMiB int64    `json:"memoryMiB"`
	UsedMiB   int64    `json:"usedMiB"`
	UsedCores int      `json:"usedCores"`
	Pods      []string `json:"pods"`
}

// JobOutcome is one job after the simulation.
type JobOutcome struct {
	Name     string `json:"name"`
	Queue    string `json:"queue"`
	Placed   int    `json:"placed"`
	Replicas int    `json:"replicas"`
	Reason   string `json:"reason,omitempty"`
}

// Summary is the machine-readable report.
type Summary struct {
	Sessions int          `json:"sessions"`
	Jobs     []JobOutcome `json:"jobs"`
	Cards    []CardUse    `json:"cards"`
	// Overcommitted lists cards whose assignments exceed their memory or cores; always empty unless a bug.
	Overcommitted []string `json:"overcommitted"`
}

// Summarise folds the bound pods' assignments onto the cards.
func (r *Result) Summarise() (*Summary, error) {
	s := &Summary{Sessions: r.Sessions, Overcommitted: []string{}}
	byUUID := map[string]*CardUse{}
	for _, n := range r.Nodes {
		inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
		if err != nil {
			return nil, err
		}
		for _, c := range inv.Cards {
			s.Cards = append(s.Cards, CardUse{Node: n.Name, Index: c.Index, UUID: c.UUID, Model: c.Model, Healthy: c.Healthy, MemoryMiB: c.MemoryMiB, Pods: []string{}})
		}
	}
	for i := range s.Cards {
		byUUID[s.Cards[i].UUID] = &s.Cards[i]
	}
	placed := map[string]int{}
	for _, p := range append(slices.Clip(r.Held), r.Bound...) {
		placed[(&Job{Name: p.Annotations[schedulingv1.KubeGroupNameAnnotationKey], Namespace: p.Namespace}).Key()]++
		a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		for _, c := range a.Containers {
			for _, ca := range c.Cards {
				cu := byUUID[ca.UUID]
				if cu == nil {
					return nil, fmt.Errorf("pod %s: assigned unknown card %s", p.Name, ca.UUID)
				}
				cu.UsedMiB += ca.MemoryMiB
				cu.UsedCores += ca.Cores
				cu.Pods = append(cu.Pods, p.Name)
			}
		}
	}
	for _, c := range s.Cards {
		if c.UsedMiB > c.MemoryMiB || c.UsedCores > 100 {
			s.Overcommitted = append(s.Overcommitted, c.UUID)
		}
	}
	for _, j := range r.Jobs {
		s.Jobs = append(s.Jobs, JobOutcome{Name: j.Key(), Queue: j.Queue, Placed: placed[j.Key()], Replicas: j.Replicas, Reason: r.Pending[j.Key()]})
	}
	return s, nil
}

// WriteText prints the jobs and a card map.
func (s *Summary) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "JOB\tQUEUE\tPLACED\tWHY NOT\n")
	for _, j := range s.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\n", j.Name, j.Queue, j.Placed, j.Replicas, j.Reason)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tCARD\tMODEL\tMEMORY (MiB)\tCORES\tMAP\tPODS\n")
	used := 0
	for _, c := range s.Cards {
		model := c.Model
		if !c.Healthy {
			model += " (unhealthy)"
		}
		if len(c.Pods) > 0 {
			used++
		}
		sort.Strings(c.Pods)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%6d / %6d\t%3d%%\t%s\t%s\n", c.Node, c.Index, model, c.UsedMiB, c.MemoryMiB, c.UsedCores,
			bar(c.UsedMiB, c.MemoryMiB), strings.Join(c.Pods, ","))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d sessions, %d of %d cards in use, over-committed cards: %d\n", s.Sessions, used, len(s.Cards), len(s.Overcommitted))
}

// bar draws memory use in ten cells.
func bar(used, total int64) string {
	if total <= 0 {
		return ""
	}
	n := int((used*10 + total - 1) / total)
	return "[" + strings.Repeat("#", min(n, 10)) + strings.Repeat(".", max(0, 10-n)) + "]"
}
