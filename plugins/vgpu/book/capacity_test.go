package book

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// A pod pinned to a card that went unhealthy is refused by every node; the reason it
// gets must come from the node holding that card, whatever order the nodes are in.
func TestNeverFitsReportsTheNodeThePodAimsAt(t *testing.T) {
	for run := 0; run < 20; run++ {
		l := NewLedger()
		l.AddNode(testNode("gpu-a", "A100", 8, -1))
		l.AddNode(testNode("gpu-c", "A30", 4, 1))
		l.AddNode(testNode("gpu-d", "L40S", 4, -1))
		req := &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: 1, MemoryPercent: 10, Cores: 10}},
			Options: api.PodOptions{UUIDInclude: []string{"GPU-gpu-c-1"}}}
		why, _ := l.NeverFits(req)
		if !strings.Contains(why, "1 unhealthy") || !strings.Contains(why, "0 of 4 fit") {
			t.Fatalf("run %d: reason %q does not come from gpu-c", run, why)
		}
	}
}
