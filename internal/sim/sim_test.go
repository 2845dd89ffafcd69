package sim

import (
	"bytes"
	"strings"
	"testing"
)

func TestDefaultScenarioPlacesEveryFittingJobWithoutOvercommit(t *testing.T) {
	s, err := DefaultScenario()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := res.Summarise()
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Overcommitted) > 0 {
		t.Fatalf("over-committed cards: %v", sum.Overcommitted)
	}
	want := map[string]int{"llm-finetune": 8, "resnet-ddp": 2, "notebooks": 6, "bert-serving": 4, "too-big": 0}
	for _, j := range sum.Jobs {
		if j.Placed != want[j.Name] {
			t.Errorf("job %s placed %d of %d, want %d (reason %q)", j.Name, j.Placed, j.Replicas, want[j.Name], j.Reason)
		}
	}
	for _, j := range sum.Jobs {
		if j.Name == "too-big" && !strings.Contains(j.Reason, "vgpu: the gang can never fit") {
			t.Errorf("too-big's reason %q does not say it can never fit", j.Reason)
		}
	}
	for _, c := range sum.Cards {
		if !c.Healthy && len(c.Pods) > 0 {
			t.Errorf("unhealthy card %s hosts %v", c.UUID, c.Pods)
		}
		if strings.Contains(c.Model, "T4") {
			for _, p := range c.Pods {
				if !strings.HasPrefix(p, "bert-serving") && !strings.HasPrefix(p, "notebooks") {
					t.Errorf("T4 card %s hosts %s, which asked for A100s", c.UUID, p)
				}
			}
		}
	}
	var out bytes.Buffer
	sum.WriteText(&out)
	if !strings.Contains(out.String(), "over-committed cards: 0") {
		t.Fatalf("text report lacks its summary line:\n%s", out.String())
	}
}

func TestScenarioErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"an unknown field is rejected", "nodes: []\ncolour: red\n", "colour"},
		{"an unknown queue is named", "jobs:\n- {name: j, queue: nope, replicas: 1, minAvailable: 1, cards: 1}\n", `unknown queue "nope"`},
		{"minAvailable above replicas is rejected", "jobs:\n- {name: j, queue: default, replicas: 1, minAvailable: 2, cards: 1}\n", "minAvailable 2"},
		{"a node group without cards is rejected", "nodes:\n- {prefix: n, count: 1, cards: 0, model: m, memoryMiB: 1}\n", "nodes[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseScenario([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
