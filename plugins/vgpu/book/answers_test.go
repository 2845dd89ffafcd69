package book

import (
	"fmt"
	"sync"
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// An answer is reused only while the node is unchanged: each booking and release
// changes what a shape gets, and the next answer must say so.
func TestAnswersFollowEveryBookingAndRelease(t *testing.T) {
	l := NewLedger()
	l.AddNode(testNode("gpu-a", "A100", 2, -1))
	req := wholeCard()
	key := new(shapeIDs).Of(shapeKey(req))
	fits := func(step string, want bool) {
		t.Helper()
		for i := 0; i < 2; i++ { // the second call is answered from memory
			a, why := l.Answer("gpu-a", key, req)
			if why != "" || (a.Refused == nil) != want {
				t.Fatalf("%s (call %d): fits=%v why=%q, want fits=%v", step, i+1, a.Refused == nil, why, want)
			}
			if _, ok := l.CachedScore("gpu-a", key, req); ok != want {
				t.Fatalf("%s: CachedScore ok=%v, want %v", step, ok, want)
			}
		}
	}
	fits("empty node", true)
	for i, task := range []vapi.TaskID{"t1", "t2"} {
		if _, err := l.Book(task, "gpu-a", req, nil); err != nil {
			t.Fatalf("booking %s: %v", task, err)
		}
		fits(fmt.Sprintf("after %d bookings", i+1), i == 0)
	}
	if _, ok := l.Release("t1"); !ok {
		t.Fatal("t1 was not booked")
	}
	fits("after a release", true)
}

// What is remembered is what is answered, at the node's version only.
func TestAnAnswerIsRememberedForItsNodeVersion(t *testing.T) {
	l := NewLedger()
	l.AddNode(testNode("gpu-a", "A100", 2, -1))
	req := wholeCard()
	key := new(shapeIDs).Of(shapeKey(req))
	e := l.entries["gpu-a"]
	l.answers.remember(&e.column, e.version, key, FitAnswer{Score: 42})
	if s, ok := l.CachedScore("gpu-a", key, req); !ok || s != 42 {
		t.Fatalf("remembered answer not used: score %v ok %v", s, ok)
	}
	e.version++
	if s, ok := l.CachedScore("gpu-a", key, req); !ok || s == 42 {
		t.Fatalf("answer of an older node version reused: score %v ok %v", s, ok)
	}
	// An answer computed against an older version never replaces a newer one.
	l.answers.remember(&e.column, e.version-1, key, FitAnswer{Score: 7})
	if a, ok := l.answers.lookup(&e.column, e.version, key); !ok || a.Score == 7 {
		t.Fatalf("older answer kept: %+v %v", a, ok)
	}
}

func TestRememberedShapesAreBounded(t *testing.T) {
	l := NewLedger()
	l.AddNode(testNode("gpu-a", "A100", 2, -1))
	e := l.entries["gpu-a"]
	for i := 0; i < 3*maxRememberedShapes; i++ {
		l.answers.remember(&e.column, e.version, ShapeID(i), FitAnswer{Score: 1})
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
	if _, ok := l.answers.lookup(&e.column, e.version, ShapeID(maxRememberedShapes)); ok {
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
	l := NewLedger()
	for i := 0; i < 8; i++ {
		l.AddNode(testNode(fmt.Sprint("gpu-", i), "A100", 2, -1))
	}
	req := wholeCard()
	key := new(shapeIDs).Of(shapeKey(req))
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				for i := 0; i < 8; i++ {
					l.Answer(fmt.Sprint("gpu-", i), key, req)
					l.CachedScore(fmt.Sprint("gpu-", i), key, req)
				}
			}
		}()
	}
	for r := 0; r < 20; r++ {
		task := vapi.TaskID(fmt.Sprint("t", r))
		if _, err := l.Book(task, fmt.Sprint("gpu-", r%8), req, nil); err == nil {
			l.Release(task)
		}
	}
	wg.Wait()
}

// The cluster's free capacity is kept between calls (enqueue asks it of every job)
// and follows each booking and release; the total does not move.
func TestFreeCapacityFollowsBookingsAndReleases(t *testing.T) {
	l := NewLedger()
	l.AddNode(testNode("gpu-a", "A100", 2, -1))
	total, _ := l.Total()
	check := func(step string, wantCores int64) {
		t.Helper()
		for i := 0; i < 2; i++ { // the second call is answered from memory
			if free, _ := l.Free(); free.Cores != wantCores {
				t.Fatalf("%s (call %d): %d%% of card cores free, want %d%%", step, i+1, free.Cores, wantCores)
			}
		}
		if now, _ := l.Total(); now != total {
			t.Fatalf("%s: total %+v, was %+v", step, now, total)
		}
	}
	check("empty node", 200)
	if _, err := l.Book("t1", "gpu-a", wholeCard(), nil); err != nil {
		t.Fatal(err)
	}
	check("after a booking", 100)
	if _, ok := l.Release("t1"); !ok {
		t.Fatal("t1 was not booked")
	}
	check("after the release", 200)
}
