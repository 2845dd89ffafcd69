package book

import (
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

func TestExceedsJudgesTheCheapestMembers(t *testing.T) {
	req := func(cards int, mib int64, pct, cores int) *TaskRequest {
		return &TaskRequest{Req: &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: cards, MemoryMiB: mib,
			MemoryPercent: pct, Cores: cores}}}}
	}
	if d := taskDemand(req(2, 0, 50, 30).Req, 40000); d != (Demand{MemoryMiB: 40000, Cores: 60, Slots: 2}) {
		t.Errorf("a percentage on the smallest card: %+v", d)
	}
	reqs := []*TaskRequest{req(1, 30000, 0, 50), req(1, 10000, 0, 50), req(1, 20000, 0, 50)}
	for _, tt := range []struct {
		name string
		need int
		c    Demand
		want string
	}{
		{"the two cheapest fit", 2, Demand{MemoryMiB: 30000, Cores: 100, Slots: 2}, ""},
		{"too few card shares", 2, Demand{MemoryMiB: 30000, Cores: 100, Slots: 1}, "2 card shares needed by 2 members, 1 free"},
		{"too little memory", 3, Demand{MemoryMiB: 50000, Cores: 200, Slots: 3}, "60000 MiB of card memory needed by 3 members, 50000 MiB free"},
		{"too few cores", 2, Demand{MemoryMiB: 30000, Cores: 99, Slots: 2}, "100% of card cores needed by 2 members, 99% free"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Exceeds(reqs, tt.need, tt.c, 40000, "free")
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("Exceeds = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRefusalsNameTheReasonMostNodesGave(t *testing.T) {
	var r Refusals
	if got := r.Dominant(); got != PendingNotTried {
		t.Fatalf("no refusals: %q", got)
	}
	for _, reason := range []string{"b", "a", "b", "a", "c"} {
		r.Add(reason)
	}
	if got := r.Dominant(); got != "a" {
		t.Fatalf("dominant %q, want a (ties to the first in order)", got)
	}
}
