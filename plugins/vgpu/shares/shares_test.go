package shares

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"volcano.sh/apis/pkg/apis/scheduling"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// TestQueueSharesBookkeeping places and releases tasks at random and checks that each
// queue's holdings stay the sum of its charges and that Admit never lets a queue past
// its deserved share, as the share is recomputed after every change.
func TestQueueSharesBookkeeping(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	s := New(fairshare.Amount{MemoryMiB: 327680, Cores: 800}, fairshare.Cards{RefMiB: 40960, WholeMiB: 40960}, api.DefaultResourceNames())
	for i, w := range []int32{3, 1, 2} {
		q := &vapi.QueueInfo{UID: vapi.QueueID(fmt.Sprint("q", i)), Name: fmt.Sprint("q", i), Weight: w}
		s.queue(q).request = fairshare.Amount{MemoryMiB: float64(r.Intn(400000)), Cores: float64(r.Intn(1200))}
	}
	s.divide()
	placed := map[vapi.TaskID]bool{}
	for step := 0; step < 5000; step++ {
		id := vapi.TaskID(fmt.Sprint("t", r.Intn(200)))
		if placed[id] {
			c := s.charged[id]
			before := *s.queues[c.queue]
			evicted := r.Intn(2) == 0
			s.Release(id, evicted)
			if evicted && r.Intn(2) == 0 {
				// preempt or reclaim discards the statement that evicted it
				if !s.Restore(id) {
					t.Fatalf("step %d: the eviction of %s cannot be restored", step, id)
				}
				after := s.queues[c.queue]
				if d, e := after.allocated.Sub(before.allocated), after.request.Sub(before.request); math.Abs(d.MemoryMiB)+math.Abs(d.Cores)+
					math.Abs(e.MemoryMiB)+math.Abs(e.Cores) > 1e-6 {
					t.Fatalf("step %d: a discarded eviction left %s holding %v asking %v, before %v and %v", step, c.queue,
						after.allocated, after.request, before.allocated, before.request)
				}
				continue
			}
			delete(placed, id)
		} else {
			q := s.order[r.Intn(len(s.order))]
			asked := fairshare.Amount{MemoryMiB: float64(1 + r.Intn(20000)), Cores: float64(r.Intn(101))}
			held := fairshare.Amount{MemoryMiB: asked.MemoryMiB * (0.5 + r.Float64()), Cores: asked.Cores}
			before := s.queues[q].allocated
			spare := s.spare(q)
			if ok, _ := s.Admit(q, asked); ok {
				// Within its share, one task past it from below, or borrowing only what
				// no other queue may claim.
				deserved := s.queues[q].deserved
				if !before.Add(asked).Within(deserved) && !fairshare.Below(before, deserved, asked) && !asked.Within(spare) {
					t.Fatalf("step %d: admitted %v to %s holding %v, deserved %v, spare %v", step, asked, q, before,
						s.queues[q].deserved, spare)
				}
				s.Place(id, q, held, asked)
				placed[id] = true
			}
		}
		sums := map[vapi.QueueID]fairshare.Amount{}
		for _, c := range s.charged {
			sums[c.queue] = sums[c.queue].Add(c.held)
		}
		for id, q := range s.queues {
			d := q.allocated.Sub(sums[id])
			if math.Abs(d.MemoryMiB) > 1e-6 || math.Abs(d.Cores) > 1e-6 {
				t.Fatalf("step %d: %s holds %v, its charges sum to %v", step, id, q.allocated, sums[id])
			}
		}
	}
}

// TestQueueOrderFollowsTheCardShare: of two queues of the same priority that both ask
// for cards, the one holding the smaller part of its card share goes first (in its
// most-served dimension); a queue of another priority, or one without vGPU demand,
// is left to proportion's order.
func TestQueueOrderFollowsTheCardShare(t *testing.T) {
	s := New(fairshare.Amount{MemoryMiB: 1000, Cores: 400}, fairshare.Cards{RefMiB: 40960, WholeMiB: 40960}, api.DefaultResourceNames())
	info := func(name string, prio int32) *vapi.QueueInfo {
		q := &scheduling.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: scheduling.QueueSpec{Weight: 1, Priority: prio}}
		return &vapi.QueueInfo{UID: vapi.QueueID(name), Name: name, Queue: q}
	}
	set := func(name string, held, deserved fairshare.Amount) {
		s.queues[vapi.QueueID(name)] = &queue{name: name, allocated: held, deserved: deserved, request: deserved.Add(held)}
	}
	set("cores-heavy", fairshare.Amount{MemoryMiB: 100, Cores: 150}, fairshare.Amount{MemoryMiB: 500, Cores: 200}) // 75 % served
	set("memory-heavy", fairshare.Amount{MemoryMiB: 400, Cores: 50}, fairshare.Amount{MemoryMiB: 500, Cores: 200}) // 80 %
	set("light", fairshare.Amount{MemoryMiB: 50, Cores: 20}, fairshare.Amount{MemoryMiB: 500, Cores: 200})         // 10 %
	s.queues["cpu-only"] = &queue{name: "cpu-only"}
	for _, tt := range []struct {
		l, r *vapi.QueueInfo
		want int
	}{
		{info("light", 0), info("cores-heavy", 0), -1},
		{info("memory-heavy", 0), info("cores-heavy", 0), 1},
		{info("cores-heavy", 0), info("cores-heavy", 0), 0},
		{info("light", 0), info("cores-heavy", 5), 0},
		{info("cpu-only", 0), info("light", 0), 0},
	} {
		if got := s.Compare(tt.l, tt.r); got != tt.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", tt.l.Name, tt.r.Name, got, tt.want)
		}
	}
}
