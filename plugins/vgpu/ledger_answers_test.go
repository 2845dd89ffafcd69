package vgpu

import (
	"fmt"
	"sync"
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

func wholeCard() *placement.Request {
	return &placement.Request{Containers: []api.ContainerRequest{{Name: "main", Cards: 1, MemoryPercent: 100, Cores: 100}},
		CardPolicy: api.PolicyBinpack, NodePolicy: api.PolicyBinpack}
}

// An answer is reused only while the node is unchanged: each booking and release
// changes what a shape gets, and the next answer must say so.
func TestAnswersFollowEveryBookingAndRelease(t *testing.T) {
	l := newLedger()
	l.addNode(reasonTestNode("gpu-a", "A100", 2, -1))
	req := wholeCard()
	key := new(shapeIDs).of(shapeKey(req))
	fits := func(step string, want bool) {
		t.Helper()
		for i := 0; i < 2; i++ { // the second call is answered from memory
			a, why := l.answer("gpu-a", key, req)
			if why != "" || (a.refused == nil) != want {
				t.Fatalf("%s (call %d): fits=%v why=%q, want fits=%v", step, i+1, a.refused == nil, why, want)
			}
			if _, ok := l.cachedScore("gpu-a", key, req); ok != want {
				t.Fatalf("%s: cachedScore ok=%v, want %v", step, ok, want)
			}
		}
	}
	fits("empty node", true)
	for i, task := range []vapi.TaskID{"t1", "t2"} {
		if _, err := l.book(task, "gpu-a", req, nil); err != nil {
			t.Fatalf("booking %s: %v", task, err)
		}
		fits(fmt.Sprintf("after %d bookings", i+1), i == 0)
	}
	if _, ok := l.release("t1"); !ok {
		t.Fatal("t1 was not booked")
	}
	fits("after a release", true)
}

// What is remembered is what is answered, at the node's version only.
func TestAnAnswerIsRememberedForItsNodeVersion(t *testing.T) {
	l := newLedger()
	l.addNode(reasonTestNode("gpu-a", "A100", 2, -1))
	req := wholeCard()
	key := new(shapeIDs).of(shapeKey(req))
	e := l.entries["gpu-a"]
	l.answers.remember(e, key, fitAnswer{score: 42})
	if s, ok := l.cachedScore("gpu-a", key, req); !ok || s != 42 {
		t.Fatalf("remembered answer not used: score %v ok %v", s, ok)
	}
	e.version++
	if s, ok := l.cachedScore("gpu-a", key, req); !ok || s == 42 {
		t.Fatalf("answer of an older node version reused: score %v ok %v", s, ok)
	}
	// An answer computed against an older version never replaces a newer one.
	e.version--
	l.answers.remember(e, key, fitAnswer{score: 7})
	e.version++
	if a, ok := l.answers.lookup(e, key); !ok || a.score == 7 {
		t.Fatalf("older answer kept: %+v %v", a, ok)
	}
}

func TestRememberedShapesAreBounded(t *testing.T) {
	l := newLedger()
	l.addNode(reasonTestNode("gpu-a", "A100", 2, -1))
	e := l.entries["gpu-a"]
	for i := 0; i < 3*maxRememberedShapes; i++ {
		l.answers.remember(e, shapeID(i), fitAnswer{score: 1})
	}
	rows := 0
	for _, r := range *l.answers.rows.Load() {
		if r != nil {
			rows++
		}
	}
	if rows != maxRememberedShapes {
		t.Fatalf("%d shapes remembered, bound %d", rows, maxRememberedShapes)
	}
	if _, ok := l.answers.lookup(e, shapeID(maxRememberedShapes)); ok {
		t.Fatal("a shape past the bound was remembered")
	}
}

// Shapes differ whenever the requests could fit differently.
func TestShapeKeysTellApartRequestsThatFitDifferently(t *testing.T) {
	one := &placement.Request{Options: api.PodOptions{TypeInclude: []string{"A100 X"}}}
	two := &placement.Request{Options: api.PodOptions{TypeInclude: []string{"A100", "X"}}}
	if shapeKey(one) == shapeKey(two) {
		t.Fatalf("type lists %q and %q share the key %s", one.Options.TypeInclude, two.Options.TypeInclude, shapeKey(one))
	}
	a, b := wholeCard(), wholeCard()
	if shapeKey(a) != shapeKey(b) {
		t.Fatal("equal requests have different keys")
	}
	b.GangSize = 4
	if shapeKey(a) == shapeKey(b) {
		t.Fatal("gang size is not part of the key")
	}
}

// Volcano predicates one task on many nodes at once while node ordering reads the
// answers: run under -race.
func TestAnswersUnderConcurrentPredicates(t *testing.T) {
	l := newLedger()
	for i := 0; i < 8; i++ {
		l.addNode(reasonTestNode(fmt.Sprint("gpu-", i), "A100", 2, -1))
	}
	req := wholeCard()
	key := new(shapeIDs).of(shapeKey(req))
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				for i := 0; i < 8; i++ {
					l.answer(fmt.Sprint("gpu-", i), key, req)
					l.cachedScore(fmt.Sprint("gpu-", i), key, req)
				}
			}
		}()
	}
	for r := 0; r < 20; r++ {
		task := vapi.TaskID(fmt.Sprint("t", r))
		if _, err := l.book(task, fmt.Sprint("gpu-", r%8), req, nil); err == nil {
			l.release(task)
		}
	}
	wg.Wait()
}

func TestShapeIDsNumberEachKeyOnce(t *testing.T) {
	var ids shapeIDs
	a, b := ids.of("a"), ids.of("b")
	if a == b || ids.of("a") != a || ids.of("b") != b {
		t.Fatalf("ids: a=%d b=%d, again a=%d b=%d", a, b, ids.of("a"), ids.of("b"))
	}
}

// The cluster's free capacity is kept between calls (enqueue asks it of every job)
// and follows each booking and release; the total does not move.
func TestFreeCapacityFollowsBookingsAndReleases(t *testing.T) {
	l := newLedger()
	l.addNode(reasonTestNode("gpu-a", "A100", 2, -1))
	total, _ := l.total()
	check := func(step string, wantCores int64) {
		t.Helper()
		for i := 0; i < 2; i++ { // the second call is answered from memory
			if free, _ := l.free(); free.cores != wantCores {
				t.Fatalf("%s (call %d): %d%% of card cores free, want %d%%", step, i+1, free.cores, wantCores)
			}
		}
		if now, _ := l.total(); now != total {
			t.Fatalf("%s: total %+v, was %+v", step, now, total)
		}
	}
	check("empty node", 200)
	if _, err := l.book("t1", "gpu-a", wholeCard(), nil); err != nil {
		t.Fatal(err)
	}
	check("after a booking", 100)
	if _, ok := l.release("t1"); !ok {
		t.Fatal("t1 was not booked")
	}
	check("after the release", 200)
}
