package sim

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParseScenario: any document either parses into a scenario whose hosts and bound
// members agree (every bound card is a card of the member's node), or is refused
// with an error that says it is the scenario's; never a panic.
func FuzzParseScenario(f *testing.F) {
	f.Add(defaultScenario)
	for _, seed := range []string{
		"hosts:\n- {name: h, cards: [{uuid: GPU-h0, index: 0, model: m, memoryMiB: 100, numa: 0, shares: 2, healthy: true}]}\n" +
			"queues:\n- {name: q, weight: 1, capability: {volcano.sh/vgpu-memory: \"100\"}, reclaimable: false}\n" +
			"jobs:\n- {name: j, queue: q, replicas: 2, minAvailable: 2, cards: 1, namespace: team, pods: [a, b], " +
			"bound: [{node: h, cards: [{uuid: GPU-h0, memoryMiB: 50, cores: 10}]}]}\n",
		"hosts:\n- {name: h, unschedulable: true, cards: [{uuid: u, model: m, memoryMiB: 1}]}\n",
		"queues:\n- {name: q, weight: 1, guarantee: {volcano.sh/vgpu-cores: 1x}}\n",
		"jobs:\n- {name: j, queue: default, replicas: 1, minAvailable: 1, cards: 1, bound: [{node: nowhere, cards: []}]}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		s, err := ParseScenario(doc)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "scenario: ") {
				t.Fatalf("error %q does not say it is the scenario's", err)
			}
			return
		}
		ownerOf, err := s.validateHosts()
		if err != nil {
			t.Fatalf("parsed, but its hosts do not validate: %v", err)
		}
		for _, j := range s.Jobs {
			if len(j.Bound) > j.Replicas || (len(j.Pods) > 0 && len(j.Pods) != j.Replicas) {
				t.Fatalf("job %s: %d bound, %d pods named, %d replicas", j.Name, len(j.Bound), len(j.Pods), j.Replicas)
			}
			for _, m := range j.Bound {
				for _, c := range m.Cards {
					if ownerOf(c.UUID) != m.Node {
						t.Fatalf("job %s: card %s bound on %s, which is %q's", j.Name, c.UUID, m.Node, ownerOf(c.UUID))
					}
				}
			}
		}
		if s.Sessions < 1 {
			t.Fatalf("sessions %d", s.Sessions)
		}
	})
}

// FuzzParseShape: a shape is either a machine of 1..16 cards of a known model, or an
// error that quotes the value as written.
func FuzzParseShape(f *testing.F) {
	for _, seed := range []string{"dgxa100", "H100x8", "h100x0", "a100-80gbx2", "x", "T4x99999999999999999999", "l40sx16", "ax1x2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseShape(in)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
				t.Fatalf("error %q does not quote %q", err, in)
			}
			return
		}
		if s.Cards < 1 || s.Cards > maxShapeCards || s.Model == "" || s.MemoryMiB < 1 || s.Name != in {
			t.Fatalf("ParseShape(%q) = %+v", in, s)
		}
		if hosts := s.Hosts("p", 2, 4); len(hosts) != 2 || len(hosts[1].Cards) != s.Cards {
			t.Fatalf("hosts of %+v: %+v", s, hosts)
		}
	})
}
