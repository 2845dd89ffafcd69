// Package sim runs Tessera's vgpu plugin inside Volcano's real scheduler framework on
// a described cluster, without an API server: the nodes, queues and jobs of a
// scenario go into Volcano's scheduler cache, real sessions run the enqueue and
// allocate actions, and binds are fed back as an informer would. It is a test and
// demo harness, not a plugin: it backs the `tessera simulate` command and tests that
// need whole sessions.
package sim

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/api"
)

//go:embed default.yaml
var defaultScenario []byte

// DefaultScenario is the embedded cluster `tessera simulate` runs without -f.
func DefaultScenario() (*Scenario, error) { return ParseScenario(defaultScenario) }

// Scenario describes a cluster and the jobs submitted to it.
type Scenario struct {
	Nodes []NodeGroup `json:"nodes"`
	// Hosts are nodes given one by one, card by card, as a node agent reports them
	// (tessera simulate --from-cluster writes the live cluster's nodes here).
	Hosts  []Host  `json:"hosts,omitempty"`
	Queues []Queue `json:"queues"`
	Jobs   []Job   `json:"jobs"`
	// Plugin holds the vgpu plugin's arguments, as in volcano-scheduler.conf.
	Plugin map[string]any `json:"plugin,omitempty"`
	// Sessions is the most scheduling sessions to run (default 3).
	Sessions int `json:"sessions,omitempty"`
}

// NodeGroup is Count identical GPU nodes named Prefix-0..Prefix-(Count-1).
type NodeGroup struct {
	Prefix    string `json:"prefix"`
	Count     int    `json:"count"`
	Cards     int    `json:"cards"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	Shares    int    `json:"shares,omitempty"`
	// Unhealthy lists card indexes reported unhealthy on every node of the group.
	Unhealthy []int `json:"unhealthy,omitempty"`
}

// Host is one node described by its cards. The cards' UUIDs are what the bound
// members of jobs name.
type Host struct {
	Name  string     `json:"name"`
	Cards []api.Card `json:"cards"`
	// Unschedulable: cordoned; its pods keep their cards, it takes no new one.
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// Queue is a Volcano queue.
type Queue struct {
	Name   string `json:"name"`
	Weight int32  `json:"weight"`
	// Capability is the most the queue's jobs may hold, as Volcano's Queue spec
	// writes it (e.g. volcano.sh/vgpu-memory: 81920); none: unlimited.
	Capability corev1.ResourceList `json:"capability,omitempty"`
	// Guarantee is what the queue keeps whatever the other queues ask.
	Guarantee corev1.ResourceList `json:"guarantee,omitempty"`
	// Reclaimable: whether other queues may take back what this one borrowed
	// (Volcano's default, true, when absent).
	Reclaimable *bool `json:"reclaimable,omitempty"`
}

// Job is a gang of identical pods, like a one-task VolcanoJob.
type Job struct {
	Name         string            `json:"name"`
	Queue        string            `json:"queue"`
	Replicas     int               `json:"replicas"`
	MinAvailable int32             `json:"minAvailable"`
	Cards        int64             `json:"cards"`
	MemoryMiB    int64             `json:"memoryMiB,omitempty"`
	MemoryPct    int64             `json:"memoryPercent,omitempty"`
	Cores        int64             `json:"cores,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	// Namespace of the job's PodGroup and pods ("sim" when empty).
	Namespace string `json:"namespace,omitempty"`
	// Pods names the members in order (bound ones first); "NAME-0".."NAME-(n-1)"
	// when empty.
	Pods []string `json:"pods,omitempty"`
	// Bound are members already running, in order: the first len(Bound) pods hold
	// these cards before the first session, as pods a scheduler placed earlier do.
	Bound []Member `json:"bound,omitempty"`
}

// Member is a bound pod of a job: its node and the cards it holds.
type Member struct {
	Node  string               `json:"node"`
	Cards []api.CardAssignment `json:"cards"`
}

// Key names a job in Result.Pending and reports: its name, prefixed with its
// namespace when it has one of its own.
func (j *Job) Key() string {
	if j.Namespace == "" || j.Namespace == namespace {
		return j.Name
	}
	return j.Namespace + "/" + j.Name
}

func (j *Job) namespace() string {
	if j.Namespace == "" {
		return namespace
	}
	return j.Namespace
}

// podName is member i's name.
func (j *Job) podName(i int) string {
	if len(j.Pods) > 0 {
		return j.Pods[i]
	}
	return fmt.Sprintf("%s-%d", j.Name, i)
}

// ParseScenario reads YAML or JSON, rejecting unknown fields.
func ParseScenario(b []byte) (*Scenario, error) {
	var s Scenario
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if s.Sessions == 0 {
		s.Sessions = 3
	}
	return &s, nil
}

func (s *Scenario) validate() error {
	queues := map[string]bool{"default": true}
	for i, q := range s.Queues {
		if q.Name == "" || q.Weight < 1 {
			return fmt.Errorf("queues[%d]: want a name and a weight ≥ 1", i)
		}
		queues[q.Name] = true
	}
	for i, n := range s.Nodes {
		if n.Prefix == "" || n.Count < 1 || n.Cards < 1 || n.MemoryMiB < 1 || n.Model == "" {
			return fmt.Errorf("nodes[%d]: want prefix, count ≥ 1, cards ≥ 1, model and memoryMiB ≥ 1", i)
		}
	}
	ownerOf, err := s.validateHosts()
	if err != nil {
		return err
	}
	for i, j := range s.Jobs {
		switch {
		case j.Name == "" || j.Replicas < 1:
			return fmt.Errorf("jobs[%d]: want a name and replicas ≥ 1", i)
		case !queues[j.Queue]:
			return fmt.Errorf("jobs[%d] (%s): unknown queue %q", i, j.Name, j.Queue)
		case j.MinAvailable < 0 || int(j.MinAvailable) > j.Replicas:
			return fmt.Errorf("jobs[%d] (%s): minAvailable %d outside 0..replicas", i, j.Name, j.MinAvailable)
		case j.Cards < 1:
			return fmt.Errorf("jobs[%d] (%s): cards must be ≥ 1", i, j.Name)
		case len(j.Pods) > 0 && len(j.Pods) != j.Replicas:
			return fmt.Errorf("jobs[%d] (%s): %d pods named for %d replicas", i, j.Name, len(j.Pods), j.Replicas)
		case len(j.Bound) > j.Replicas:
			return fmt.Errorf("jobs[%d] (%s): %d bound members for %d replicas", i, j.Name, len(j.Bound), j.Replicas)
		}
		for m, b := range j.Bound {
			if len(b.Cards) == 0 {
				return fmt.Errorf("jobs[%d] (%s): bound[%d]: no cards", i, j.Name, m)
			}
			for _, c := range b.Cards {
				if ownerOf(c.UUID) != b.Node {
					return fmt.Errorf("jobs[%d] (%s): bound[%d]: card %q is not a card of host %q", i, j.Name, m, c.UUID, b.Node)
				}
			}
		}
	}
	if s.Sessions < 0 {
		return fmt.Errorf("sessions: %d is negative", s.Sessions)
	}
	return nil
}

// validateHosts checks the hosts and returns the owner of a card UUID: a host's
// card, or card c of a node group's node (GPU-NODE-c), without listing the groups'
// nodes, whose count the document sets.
func (s *Scenario) validateHosts() (func(uuid string) string, error) {
	cards := map[string]string{}
	names := map[string]bool{}
	for i, h := range s.Hosts {
		switch {
		case h.Name == "" || len(h.Cards) == 0:
			return nil, fmt.Errorf("hosts[%d]: want a name and at least one card", i)
		case names[h.Name] || s.groupOf(h.Name) != nil:
			return nil, fmt.Errorf("hosts[%d]: node name %q is taken", i, h.Name)
		}
		names[h.Name] = true
		for c, card := range h.Cards {
			if card.UUID == "" || card.MemoryMiB < 1 || card.Model == "" {
				return nil, fmt.Errorf("hosts[%d] (%s): cards[%d]: want uuid, model and memoryMiB ≥ 1", i, h.Name, c)
			}
			if _, dup := cards[card.UUID]; dup {
				return nil, fmt.Errorf("hosts[%d] (%s): cards[%d]: uuid %q appears twice", i, h.Name, c, card.UUID)
			}
			cards[card.UUID] = h.Name
		}
	}
	return func(uuid string) string {
		if node, ok := cards[uuid]; ok {
			return node
		}
		// GPU-NODE-c, NODE a group's node: the last dash ends the node's name.
		rest, ok := strings.CutPrefix(uuid, "GPU-")
		i := strings.LastIndex(rest, "-")
		if !ok || i < 0 {
			return ""
		}
		c, err := strconv.Atoi(rest[i+1:])
		if g := s.groupOf(rest[:i]); err == nil && g != nil && c >= 0 && c < g.Cards && groupCardUUID(rest[:i], c) == uuid {
			return rest[:i]
		}
		return ""
	}, nil
}

// groupOf is the node group whose node is named name (PREFIX-i, 0 ≤ i < count), or nil.
func (s *Scenario) groupOf(name string) *NodeGroup {
	for i := range s.Nodes {
		g := &s.Nodes[i]
		n, ok := strings.CutPrefix(name, g.Prefix+"-")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < g.Count && fmt.Sprintf("%s-%d", g.Prefix, i) == name {
			return g
		}
	}
	return nil
}
