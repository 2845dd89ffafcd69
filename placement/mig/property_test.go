package mig

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// randomTable draws a small table: 4 to 8 slots, 1 to 4 profiles, each with a size
// and some aligned or unaligned starts on the card.
func randomTable(r *rand.Rand) Table {
	t := Table{Slots: 4 + r.Intn(5)}
	for k := 0; k < 1+r.Intn(4); k++ {
		p := Profile{Name: fmt.Sprintf("p%d", k), Size: 1 + r.Intn(t.Slots/2+1)}
		for s := 0; s+p.Size <= t.Slots; s++ {
			if r.Intn(3) > 0 {
				p.Starts = append(p.Starts, s)
			}
		}
		if len(p.Starts) == 0 {
			p.Starts = []int{0}
		}
		if r.Intn(3) == 0 {
			p.Max = 1 + r.Intn(len(p.Starts))
		}
		t.Profiles = append(t.Profiles, p)
	}
	return t
}

// randomGeometry places a few random instances, skipping those that do not fit.
func randomGeometry(r *rand.Rand, t Table) Geometry {
	var g Geometry
	for k := 0; k < r.Intn(5); k++ {
		p := t.Profiles[r.Intn(len(t.Profiles))]
		try := append(g, Instance{Profile: p.Name, Start: p.Starts[r.Intn(len(p.Starts))]})
		if t.Validate(try) == nil {
			g = try
		}
	}
	return g
}

// bruteForce tries every assignment of starts to the wanted instances and returns
// whether any is valid and, of the valid ones, the most current instances kept.
func bruteForce(t Table, current Geometry, want []string) (bool, int) {
	found, best := false, -1
	g := make(Geometry, len(want))
	var walk func(k int)
	walk = func(k int) {
		if k == len(want) {
			if t.Validate(g) == nil {
				found = true
				best = max(best, kept(current, g))
			}
			return
		}
		p, _ := t.Profile(want[k])
		for _, s := range p.Starts {
			g[k] = Instance{Profile: p.Name, Start: s}
			walk(k + 1)
		}
	}
	walk(0)
	return found, best
}

// kept counts the current instances that the plan leaves where they are.
func kept(current, plan Geometry) int {
	n := 0
	for _, in := range current {
		if slices.Contains(plan, in) {
			n++
		}
	}
	return n
}

func multiset(names []string) map[string]int {
	m := map[string]int{}
	for _, n := range names {
		m[n]++
	}
	return m
}

// On random small cases: every plan follows the placement rules and holds exactly the
// wish; the planner says "cannot fit" only when no assignment of starts fits; and it
// keeps as many current instances as the best layout a brute-force search finds.
func TestPlanAgreesWithBruteForce(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	fits, refused := 0, 0
	for i := 0; i < 3000; i++ {
		table := randomTable(r)
		if i%3 == 0 {
			table = a100()
		}
		current := randomGeometry(r, table)
		var want []string
		for k := 0; k < 1+r.Intn(5); k++ {
			want = append(want, table.Profiles[r.Intn(len(table.Profiles))].Name)
		}
		plan, err := Plan(table, current, want)
		possible, best := bruteForce(table, current, want)
		switch {
		case err != nil && !errors.Is(err, ErrCannotFit):
			t.Fatalf("case %d: unexpected error %v", i, err)
		case err != nil && possible:
			t.Fatalf("case %d: %v says cannot fit %v on %+v (current %v), but a layout exists", i, err, want, table, current)
		case err == nil && !possible:
			t.Fatalf("case %d: plan %v for %v exists where brute force finds none", i, plan, want)
		case err == nil:
			fits++
			if verr := table.Validate(plan); verr != nil {
				t.Fatalf("case %d: plan %v breaks the rules: %v", i, plan, verr)
			}
			if fmt.Sprint(multiset(planNames(plan))) != fmt.Sprint(multiset(want)) {
				t.Fatalf("case %d: plan %v does not hold exactly %v", i, plan, want)
			}
			if k := kept(current, plan); k != best {
				t.Fatalf("case %d: plan %v keeps %d of %v, a layout keeping %d exists", i, plan, k, current, best)
			}
		default:
			refused++
		}
	}
	// Both outcomes must be exercised, or the property proves little.
	if fits < 500 || refused < 300 {
		t.Fatalf("only %d fitting and %d refused cases", fits, refused)
	}
}

func planNames(g Geometry) []string {
	out := make([]string, len(g))
	for i, in := range g {
		out[i] = in.Profile
	}
	return out
}
