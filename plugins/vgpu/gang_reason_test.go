package vgpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

func reasonTestNode(name, model string, cards int, unhealthy int) *placement.Node {
	inv := &api.NodeInventory{Version: "v1"}
	for i := 0; i < cards; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model,
			MemoryMiB: 24576, NUMA: -1, Shares: 10, Healthy: i != unhealthy})
	}
	return placement.NewNode(name, inv, 1)
}

// A pod pinned to a card that went unhealthy is refused by every node; the reason it
// gets must come from the node holding that card, whatever order the nodes are in.
func TestNeverFitsReportsTheNodeThePodAimsAt(t *testing.T) {
	for run := 0; run < 20; run++ {
		l := newLedger()
		l.addNode(reasonTestNode("gpu-a", "A100", 8, -1))
		l.addNode(reasonTestNode("gpu-c", "A30", 4, 1))
		l.addNode(reasonTestNode("gpu-d", "L40S", 4, -1))
		req := &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: 1, MemoryPercent: 10, Cores: 10}},
			Options: api.PodOptions{UUIDInclude: []string{"GPU-gpu-c-1"}}}
		why, _ := l.neverFits(req)
		if !strings.Contains(why, "1 unhealthy") || !strings.Contains(why, "0 of 4 fit") {
			t.Fatalf("run %d: reason %q does not come from gpu-c", run, why)
		}
	}
}
