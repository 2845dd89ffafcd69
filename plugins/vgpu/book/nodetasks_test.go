package book

import (
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// The node's vGPU tasks are walked again after the plugin saw one of them change
// (Touch) or the node's task count changed, and only then.
func TestNodeTasksAreBuiltAgainWhenTheNodeChanges(t *testing.T) {
	l := NewLedger()
	l.AddNode(placement.NewNode("n1", &api.NodeInventory{Version: api.InventoryVersion}, 1))
	node := vapi.NewNodeInfo(kubeNode("n1"))
	a := vapi.NewTaskInfo(assigned(vgpuPod("a", "n1", 1, 20000, 100), "n1", "GPU-n1-0", 20000, 100))
	b := vapi.NewTaskInfo(assigned(vgpuPod("b", "n1", 1, 20000, 100), "n1", "GPU-n1-1", 20000, 100))
	cpu := vapi.NewTaskInfo(vgpuPod("c", "n1", 0, 0, 0))
	for _, task := range []*vapi.TaskInfo{a, b, cpu} {
		if err := node.AddTask(task); err != nil {
			t.Fatal(err)
		}
	}
	isVGPU := func(t *vapi.TaskInfo) bool { return t.Name != "c" }
	first := l.NodeTasks(node, nil, isVGPU)
	if len(first.Running) != 2 || first.AnyReleasing {
		t.Fatalf("running %d, releasing %v: want the two vGPU pods running", len(first.Running), first.AnyReleasing)
	}
	if again := l.NodeTasks(node, nil, isVGPU); again != first {
		t.Fatal("an unchanged node was walked again")
	}

	// Volcano evicts a: the node's copy becomes Releasing and the plugin's handler touches the node.
	evicted := a.Clone()
	evicted.Status = vapi.Releasing
	if err := node.UpdateTask(evicted); err != nil {
		t.Fatal(err)
	}
	l.Touch("n1")
	after := l.NodeTasks(node, nil, isVGPU)
	if len(after.Running) != 1 || !after.AnyReleasing || after.Releasing != uidHash(a.UID)*3 {
		t.Fatalf("after the eviction: running %d, releasing %v: want b running and a releasing", len(after.Running), after.AnyReleasing)
	}

	// A task added without the plugin's handler (it changes the node's task count).
	if err := node.AddTask(vapi.NewTaskInfo(assigned(vgpuPod("d", "n1", 1, 20000, 0), "n1", "GPU-n1-1", 20000, 0))); err != nil {
		t.Fatal(err)
	}
	if got := l.NodeTasks(node, nil, isVGPU); len(got.Running) != 2 {
		t.Fatalf("after a task was added: running %d, want 2", len(got.Running))
	}
	// A node the ledger does not know is walked every time.
	other := vapi.NewNodeInfo(kubeNode("n2"))
	if l.NodeTasks(other, nil, isVGPU) == l.NodeTasks(other, nil, isVGPU) {
		t.Error("the tasks of a node without cards were remembered")
	}
}
