package book

import (
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
)

// A node's pipelined tasks are named by their set (Hash) and booked on a copy of its
// cards (AccountOn); a task pipelined again moves, and one removed is forgotten.
func TestPipelinesFollowTheSessionsPipelinedTasks(t *testing.T) {
	ps := NewPipelines()
	if ps.OnNode("n1") || ps.Hash("n1") != 0 {
		t.Fatal("an empty set has tasks")
	}
	fit := func(node string, cores int) PipelinedFit {
		return PipelinedFit{Node: node, QoS: api.QoSFixedShare, Containers: []api.ContainerAssignment{{Name: "main",
			Cards: []api.CardAssignment{{UUID: "GPU-" + node + "-0", MemoryMiB: 1000, Cores: cores}}}}}
	}
	ps.Add("a", fit("n1", 30))
	ps.Add("b", fit("n1", 20))
	if !ps.OnNode("n1") || ps.OnNode("n2") || ps.Hash("n1") != uidHash("a")^uidHash("b") {
		t.Fatalf("after two pipelines onto n1: on n1 %v, on n2 %v", ps.OnNode("n1"), ps.OnNode("n2"))
	}
	n := testNode("n1", "A100", 1, -1)
	ps.AccountOn("n1", n)
	if used := n.Cards[0].Used.Cores; used != 50 {
		t.Errorf("n1's card holds %d cores after AccountOn, want 50", used)
	}
	ps.Add("a", fit("n2", 30)) // pipelined again, elsewhere
	if got, ok := ps.Get("a"); !ok || got.Node != "n2" || ps.Hash("n1") != uidHash("b") {
		t.Fatalf("a after moving: %+v %v", got, ok)
	}
	for _, id := range []vapi.TaskID{"a", "b", "never"} {
		ps.Remove(id)
	}
	if ps.OnNode("n1") || ps.OnNode("n2") || ps.Hash("n1") != 0 {
		t.Fatal("removed tasks are still pipelined")
	}
}
