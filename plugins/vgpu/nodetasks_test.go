package vgpu

import (
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// The node's vGPU tasks are walked again after the plugin saw one of them change
// (touch) or the node's task count changed, and only then.
func TestNodeTasksAreBuiltAgainWhenTheNodeChanges(t *testing.T) {
	l := newLedger()
	l.addNode(placement.NewNode("n1", &api.NodeInventory{Version: api.InventoryVersion}, 1))
	node := vapi.NewNodeInfo(gpuNode("n1", 2, "NVIDIA A100", 40960))
	a := vapi.NewTaskInfo(holding("a", "n1", "GPU-n1-0", 100, 1))
	b := vapi.NewTaskInfo(holding("b", "n1", "GPU-n1-1", 100, 1))
	cpu := vapi.NewTaskInfo(runningCPU("c", "n1"))
	for _, task := range []*vapi.TaskInfo{a, b, cpu} {
		if err := node.AddTask(task); err != nil {
			t.Fatal(err)
		}
	}
	isVGPU := func(t *vapi.TaskInfo) bool { return t.Name != "c" }
	first := l.nodeTasks(node, nil, isVGPU)
	if len(first.running) != 2 || first.anyReleasing {
		t.Fatalf("running %d, releasing %v: want the two vGPU pods running", len(first.running), first.anyReleasing)
	}
	if again := l.nodeTasks(node, nil, isVGPU); again != first {
		t.Fatal("an unchanged node was walked again")
	}

	// Volcano evicts a: the node's copy becomes Releasing and the plugin's handler touches the node.
	evicted := a.Clone()
	evicted.Status = vapi.Releasing
	if err := node.UpdateTask(evicted); err != nil {
		t.Fatal(err)
	}
	l.touch("n1")
	after := l.nodeTasks(node, nil, isVGPU)
	if len(after.running) != 1 || !after.anyReleasing || after.releasing != uidHash(a.UID)*3 {
		t.Fatalf("after the eviction: running %d, releasing %v: want b running and a releasing", len(after.running), after.anyReleasing)
	}

	// A task added without the plugin's handler (it changes the node's task count).
	if err := node.AddTask(vapi.NewTaskInfo(holding("d", "n1", "GPU-n1-1", 0, 1))); err != nil {
		t.Fatal(err)
	}
	if got := l.nodeTasks(node, nil, isVGPU); len(got.running) != 2 {
		t.Fatalf("after a task was added: running %d, want 2", len(got.running))
	}
}
