package book

import (
	"fmt"
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// BenchmarkGangPredicates is the allocate action's per-task work in the vgpu plugin,
// on 1,000 nodes of 8 cards, for 8 jobs of 8 identical members: each member is
// predicated on every node, the nodes that fit are scored, and it is booked on the
// best one (which changes that node alone). Side by side in one run: each node's
// answers remembered by request shape (what the plugin does) and the engine run on
// every call (answers remembered by nobody).
//
//	go test -run '^$' -bench GangPredicates ./plugins/vgpu/book
func BenchmarkGangPredicates(b *testing.B) {
	shapes := []api.ContainerRequest{
		{Name: "main", Cards: 1, MemoryMiB: 8192, Cores: 10},
		{Name: "main", Cards: 1, MemoryPercent: 25, Cores: 25},
		{Name: "main", Cards: 1, MemoryPercent: 100, Cores: 100},
		{Name: "main", Cards: 2, MemoryPercent: 50, Cores: 50},
	}
	names := make([]string, 1000)
	for n := range names {
		names[n] = fmt.Sprintf("node-%04d", n)
	}
	for _, mode := range []struct {
		name   string
		shapes int
	}{{"remembered", maxRememberedShapes}, {"engine-every-call", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				l := NewLedger()
				l.answers.bound = mode.shapes
				for n := 0; n < 1000; n++ {
					l.AddNode(testNode(names[n], "A100", 8, -1))
				}
				var ids shapeIDs
				b.StartTimer()
				for job := 0; job < 8; job++ {
					req := &placement.Request{Containers: []api.ContainerRequest{shapes[job%len(shapes)]},
						CardPolicy: api.PolicyBinpack, NodePolicy: api.PolicyBinpack, GangSize: 8}
					key := ids.Of(shapeKey(req))
					for member := 0; member < 8; member++ {
						best, bestScore := "", -1.0
						for n := 0; n < 1000; n++ {
							node := names[n]
							if a, _ := l.Answer(node, key, req); a.Refused != nil {
								continue
							}
							if s, ok := l.CachedScore(node, key, req); ok && s > bestScore {
								best, bestScore = node, s
							}
						}
						if _, err := l.Book(vapi.TaskID(fmt.Sprint(job, "-", member)), best, req, nil); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}
