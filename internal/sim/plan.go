package sim

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/api"
)

// Plan answers "which of the pending vGPU pods would Added more nodes of Shape
// place?": each pending pod as the cluster is and with the nodes added.
type Plan struct {
	Shape string `json:"shape"`
	Added int    `json:"added"`
	// AddedNodes are the names the added nodes got in the simulation.
	AddedNodes []string `json:"addedNodes,omitempty"`
	// SchedulerConf says where the vgpu plugin's arguments were read ("" : its defaults).
	SchedulerConf string    `json:"schedulerConf,omitempty"`
	Pods          []PodPlan `json:"pods"`
	AsIs          Tally     `json:"asIs"`
	WithAdded     Tally     `json:"withAdded"`
	Notes         []string  `json:"notes,omitempty"`
}

// PodPlan is one pending pod's outcome in both runs.
type PodPlan struct {
	PendingPod
	AsIs      Outcome `json:"asIs"`
	WithAdded Outcome `json:"withAdded"`
}

// Outcome is where a pod landed, or the scheduler's reason for its gang.
type Outcome struct {
	Placed bool   `json:"placed"`
	Node   string `json:"node,omitempty"`
	// Cards are the indexes of the cards it got on the node.
	Cards  []int  `json:"cards,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Tally counts the pending pods a run placed and the gangs (PodGroups, a pod
// without one counting alone) they belong to.
type Tally struct {
	Placed  int `json:"placed"`
	Pending int `json:"pending"`
	Gangs   int `json:"gangs"`
}

// PlanCapacity runs the live scenario twice, as it is and with n nodes of the shape
// added, and folds both runs onto the pending pods. The added nodes' cards get the
// shares the cluster's cards most often have (10 without any).
func PlanCapacity(l *Live, shape Shape, n int) (*Plan, error) {
	if n < 0 {
		return nil, fmt.Errorf("added nodes: %d is negative", n)
	}
	p := &Plan{Shape: shape.Name, Added: n, Notes: l.Notes}
	asIs, err := runOutcomes(l.Scenario)
	if err != nil {
		return nil, fmt.Errorf("as is: %w", err)
	}
	grown := *l.Scenario
	added := shape.Hosts(addedPrefix(l.Scenario, shape), n, commonShares(l.Scenario))
	grown.Hosts = append(append([]Host(nil), l.Scenario.Hosts...), added...)
	for _, h := range added {
		p.AddedNodes = append(p.AddedNodes, h.Name)
	}
	withAdded, err := runOutcomes(&grown)
	if err != nil {
		return nil, fmt.Errorf("with %d added nodes: %w", n, err)
	}
	for _, pp := range l.Pending {
		key := pp.Namespace + "/" + pp.Name
		p.Pods = append(p.Pods, PodPlan{PendingPod: pp, AsIs: asIs.outcome(key, pp.Job), WithAdded: withAdded.outcome(key, pp.Job)})
	}
	p.AsIs = tally(p.Pods, func(x PodPlan) Outcome { return x.AsIs })
	p.WithAdded = tally(p.Pods, func(x PodPlan) Outcome { return x.WithAdded })
	return p, nil
}

// outcomes is one run, indexed for the pending pods.
type outcomes struct {
	bound   map[string]*corev1.Pod // namespace/name
	index   map[string]int         // card UUID -> index on its node
	pending map[string]string      // job key -> reason
}

func runOutcomes(s *Scenario) (*outcomes, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	res, err := Run(s)
	if err != nil {
		return nil, err
	}
	o := &outcomes{bound: map[string]*corev1.Pod{}, index: map[string]int{}, pending: res.Pending}
	for _, p := range res.Bound {
		o.bound[p.Namespace+"/"+p.Name] = p
	}
	for _, n := range res.Nodes {
		inv, err := api.DecodeInventory(n.Annotations[api.AnnotationInventory])
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		for _, c := range inv.Cards {
			o.index[c.UUID] = c.Index
		}
	}
	return o, nil
}

func (o *outcomes) outcome(pod, job string) Outcome {
	p := o.bound[pod]
	if p == nil {
		reason := o.pending[job]
		if reason == "" {
			reason = "not placed within the simulated sessions"
		}
		return Outcome{Reason: reason}
	}
	out := Outcome{Placed: true, Node: p.Spec.NodeName}
	if a, err := api.DecodeAssignment(p.Annotations[api.AnnotationAssignment]); err == nil {
		for _, c := range a.Containers {
			for _, ca := range c.Cards {
				out.Cards = append(out.Cards, o.index[ca.UUID])
			}
		}
	}
	sort.Ints(out.Cards)
	return out
}

func tally(pods []PodPlan, of func(PodPlan) Outcome) Tally {
	t := Tally{Pending: len(pods)}
	gangs := map[string]bool{}
	for _, p := range pods {
		if of(p).Placed {
			t.Placed++
			gangs[p.Job] = true
		}
	}
	t.Gangs = len(gangs)
	return t
}

// addedPrefix names the added nodes after the shape, clear of the cluster's names.
func addedPrefix(s *Scenario, shape Shape) string {
	base := "added-" + strings.ToLower(strings.NewReplacer(" ", "-", "/", "-").Replace(shape.Name))
	taken := func(prefix string) bool {
		for _, h := range s.Hosts {
			if strings.HasPrefix(h.Name, prefix+"-") {
				return true
			}
		}
		for _, g := range s.Nodes {
			if strings.HasPrefix(g.Prefix, prefix) {
				return true
			}
		}
		return false
	}
	prefix := base
	for i := 2; taken(prefix); i++ {
		prefix = fmt.Sprintf("%s-%d", base, i)
	}
	return prefix
}

// commonShares is the shares value most of the scenario's cards have; 10 without
// cards, the scenario format's default.
func commonShares(s *Scenario) int {
	count := map[int]int{}
	for _, h := range s.Hosts {
		for _, c := range h.Cards {
			count[c.Shares]++
		}
	}
	best, n := 10, 0
	for shares, k := range count {
		if k > n || (k == n && shares < best) {
			best, n = shares, k
		}
	}
	return best
}

// Headline is the plan's answer in one line.
func (p *Plan) Headline() string {
	return fmt.Sprintf("%d more %s nodes place %d of %d pending vGPU pods (%d gangs)",
		p.Added, p.Shape, p.WithAdded.Placed, p.WithAdded.Pending, p.WithAdded.Gangs)
}

// WriteText prints the pending pods side by side, as is and with the added nodes,
// then the scheduler's reasons for the gangs left pending, then the answer.
// Without added nodes only the cluster as it is is shown.
func (p *Plan) WriteText(w io.Writer) error {
	type side struct {
		header, title string
		of            func(PodPlan) Outcome
	}
	sides := []side{{"AS IS", "as is", func(x PodPlan) Outcome { return x.AsIs }}}
	if p.Added > 0 {
		sides = append(sides, side{fmt.Sprintf("WITH %d MORE %s", p.Added, p.Shape), fmt.Sprintf("with %d more %s", p.Added, p.Shape),
			func(x PodPlan) Outcome { return x.WithAdded }})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "POD\tQUEUE\tGANG (MIN)")
	for _, sd := range sides {
		fmt.Fprintf(tw, "\t%s", sd.header)
	}
	fmt.Fprintln(tw)
	for _, pp := range p.Pods {
		fmt.Fprintf(tw, "%s/%s\t%s\t%s (%d)", pp.Namespace, pp.Name, pp.Queue, pp.Job, pp.MinMember)
		for _, sd := range sides {
			fmt.Fprintf(tw, "\t%s", cell(sd.of(pp)))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, side := range sides {
		seen := map[string]bool{}
		for _, pp := range p.Pods {
			o := side.of(pp)
			if o.Placed || seen[pp.Job] {
				continue
			}
			if len(seen) == 0 {
				fmt.Fprintf(w, "\nWhy pending, %s:\n", side.title)
			}
			seen[pp.Job] = true
			fmt.Fprintf(w, "  %s: %s\n", pp.Job, o.Reason)
		}
	}
	conf := "the vgpu plugin's defaults (no scheduler conf read)"
	if p.SchedulerConf != "" {
		conf = "the vgpu arguments of " + p.SchedulerConf
	}
	fmt.Fprintf(w, "\nSimulated with %s.\n", conf)
	if len(p.Notes) > 0 {
		fmt.Fprintln(w, "\nNot simulated as in the cluster:")
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	_, err := fmt.Fprintf(w, "\nAs is, the cluster places %d of %d pending vGPU pods (%d gangs).\n", p.AsIs.Placed, p.AsIs.Pending, p.AsIs.Gangs)
	if p.Added > 0 {
		_, err = fmt.Fprintln(w, p.Headline()+".")
	}
	return err
}

func cell(o Outcome) string {
	if !o.Placed {
		return "pending"
	}
	cards := make([]string, len(o.Cards))
	for i, c := range o.Cards {
		cards[i] = fmt.Sprint(c)
	}
	return fmt.Sprintf("%s cards %s", o.Node, strings.Join(cards, ","))
}
