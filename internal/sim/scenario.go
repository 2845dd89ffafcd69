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

	"sigs.k8s.io/yaml"
)

//go:embed default.yaml
var defaultScenario []byte

// DefaultScenario is the embedded cluster `tessera simulate` runs without -f.
func DefaultScenario() (*Scenario, error) { return ParseScenario(defaultScenario) }

// Scenario describes a cluster and the jobs submitted to it.
type Scenario struct {
	Nodes  []NodeGroup `json:"nodes"`
	Queues []Queue     `json:"queues"`
	Jobs   []Job       `json:"jobs"`
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

// Queue is a Volcano queue.
type Queue struct {
	Name   string `json:"name"`
	Weight int32  `json:"weight"`
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
		}
	}
	if s.Sessions < 0 {
		return fmt.Errorf("sessions: %d is negative", s.Sessions)
	}
	return nil
}
