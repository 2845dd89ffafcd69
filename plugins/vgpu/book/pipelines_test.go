package book

import (
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// A node's pipelined tasks are named by their set (Hash) and booked on a copy of its
// cards (AccountOn); a task pipelined again moves, and one removed is forgotten.
func TestPipelinesFollowTheSessionsPipelinedTasks(t *testing.T) {
	ps := NewPipelines()
	if ps.OnNode("n1") || ps.Hash("n1") != 0 {
		t.Fatal("an empty set has tasks")
	}
	fit := func(node string, cores int) PipelinedFit {
		return PipelinedFit{Node: node, Tenancy: placement.Tenancy{QoS: api.QoSFixedShare}, Containers: []api.ContainerAssignment{{Name: "main",
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

// A task pipelined idle-only holds its card from the moment it is pipelined: the
// predicate's fit beside the node's pipelines sees the card held.
func TestAPipelinedIdleOnlyTaskHoldsItsCard(t *testing.T) {
	ps := NewPipelines()
	ps.Add("mutex", PipelinedFit{Node: "n1", Tenancy: placement.Tenancy{QoS: api.QoSFixedShare, IdleOnly: true},
		Containers: []api.ContainerAssignment{{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-n1-0", MemoryMiB: 1000, Cores: 10}}}}})
	n := testNode("n1", "A100", 1, -1)
	ps.AccountOn("n1", n)
	req := &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: 1, MemoryMiB: 1000, Cores: 10}},
		CardPolicy: api.PolicyBinpack, NodePolicy: api.PolicyBinpack}
	if _, ferr := placement.FitPod(n, req); ferr == nil || ferr.Rejects[0].Reason != placement.ReasonHeldIdleOnly {
		t.Fatalf("a pod joined the card an idle-only task is pipelined to: %v", ferr)
	}
}
