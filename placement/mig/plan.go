// Package mig plans MIG layouts: given a card model's profile table, the card's
// current GPU instances and the profiles wanted, it finds where each wanted instance
// goes so that NVML's placement rules hold, keeping as many current instances where
// they are as it can. It is pure maths: the node agent's applier (deviceplugin/mig)
// reads the table and the current layout from NVML and carries the plan out.
package mig

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// ErrInvalid is wrapped when a table, a layout or a wish names something the card
// model does not have, or breaks a placement rule.
var ErrInvalid = errors.New("invalid MIG layout")

// ErrCannotFit is wrapped when no layout holds every wanted instance.
var ErrCannotFit = errors.New("cannot fit")

// Profile is one GPU-instance profile of a card model, in NVML's terms: an instance
// occupies Size memory slices from one of Starts.
type Profile struct {
	Name   string
	Size   int
	Starts []int
	// Max is how many instances of the profile the card holds at once; 0 means as
	// many as its placements allow.
	Max int
}

// Table is a card model's profile table.
type Table struct {
	// Slots is the number of memory slices (8 on A100, H100 and B200).
	Slots    int
	Profiles []Profile
}

// Instance is one GPU instance: a profile placed at a start slot.
type Instance struct {
	Profile string
	Start   int
}

func (i Instance) String() string { return fmt.Sprintf("%s@%d", i.Profile, i.Start) }

// Geometry is a card's layout of GPU instances.
type Geometry []Instance

func (g Geometry) String() string {
	parts := make([]string, len(g))
	for i, in := range g {
		parts[i] = in.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Profile returns the profile named name.
func (t Table) Profile(name string) (Profile, bool) {
	for _, p := range t.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// limit is how many instances of p the card holds at once.
func (p Profile) limit() int {
	if p.Max > 0 {
		return p.Max
	}
	return len(p.Starts)
}

// Check reports the first problem in a table: a profile without a name, repeated,
// or with a placement that leaves the card.
func (t Table) Check() error {
	if t.Slots < 1 || t.Slots > 64 {
		return fmt.Errorf("%w: slots: %d is outside 1..64", ErrInvalid, t.Slots)
	}
	seen := map[string]bool{}
	for i, p := range t.Profiles {
		switch {
		case p.Name == "":
			return fmt.Errorf("%w: profiles[%d]: no name", ErrInvalid, i)
		case seen[p.Name]:
			return fmt.Errorf("%w: profiles[%d]: %q is listed twice", ErrInvalid, i, p.Name)
		case p.Size < 1 || p.Size > t.Slots:
			return fmt.Errorf("%w: profile %s: size %d is outside 1..%d", ErrInvalid, p.Name, p.Size, t.Slots)
		case p.Max < 0:
			return fmt.Errorf("%w: profile %s: max %d is negative", ErrInvalid, p.Name, p.Max)
		}
		for _, s := range p.Starts {
			if s < 0 || s+p.Size > t.Slots {
				return fmt.Errorf("%w: profile %s: start %d with size %d leaves the %d slots", ErrInvalid, p.Name, s, p.Size, t.Slots)
			}
		}
		seen[p.Name] = true
	}
	return nil
}

// Validate reports the first way a geometry breaks the table's rules: an unknown
// profile, a start the profile does not allow, more instances of a profile than the
// card holds, or two instances sharing a slot.
func (t Table) Validate(g Geometry) error {
	var used uint64
	counts := map[string]int{}
	for i, in := range g {
		p, ok := t.Profile(in.Profile)
		if !ok {
			return fmt.Errorf("%w: instance %d: unknown profile %q", ErrInvalid, i, in.Profile)
		}
		if !slices.Contains(p.Starts, in.Start) {
			return fmt.Errorf("%w: instance %d: %s cannot start at slot %d (starts %v)", ErrInvalid, i, in.Profile, in.Start, p.Starts)
		}
		if counts[p.Name]++; counts[p.Name] > p.limit() {
			return fmt.Errorf("%w: instance %d: more than %d of %s", ErrInvalid, i, p.limit(), p.Name)
		}
		mask := span(in.Start, p.Size)
		if used&mask != 0 {
			return fmt.Errorf("%w: instance %d: %s overlaps another instance", ErrInvalid, i, in)
		}
		used |= mask
	}
	return nil
}

func span(start, size int) uint64 { return (uint64(1)<<size - 1) << start }

// Plan returns a geometry holding exactly the wanted profiles (a multiset: a name
// listed twice is two instances). Of all such geometries it returns one that keeps
// the most current instances (same profile, same start); instances of the current
// geometry that the plan does not keep are to be destroyed. The result is sorted by
// start. When no geometry holds the wish the error wraps ErrCannotFit and says why.
func Plan(t Table, current Geometry, want []string) (Geometry, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if err := t.Validate(current); err != nil {
		return nil, fmt.Errorf("current layout %v: %w", current, err)
	}
	need := map[string]int{}
	total := 0
	for i, name := range want {
		p, ok := t.Profile(name)
		if !ok {
			return nil, fmt.Errorf("%w: wanted[%d]: unknown profile %q", ErrInvalid, i, name)
		}
		need[name]++
		total += p.Size
	}
	for _, name := range slices.Sorted(maps.Keys(need)) {
		p, _ := t.Profile(name)
		if need[name] > p.limit() {
			return nil, fmt.Errorf("%w: %d of %s wanted, the card holds at most %d", ErrCannotFit, need[name], name, p.limit())
		}
	}
	if total > t.Slots {
		return nil, fmt.Errorf("%w: %v needs %d memory slices, the card has %d", ErrCannotFit, want, total, t.Slots)
	}
	// Try to keep the largest sets of current instances first; the first set whose
	// remainder can be placed wins. A card has at most a handful of instances.
	for _, keep := range keepSets(current, need) {
		if g, ok := completeLayout(t, keep, need); ok {
			sort.Slice(g, func(i, j int) bool { return g[i].Start < g[j].Start })
			return g, nil
		}
	}
	return nil, fmt.Errorf("%w: no placement of %v on the card's %d slices follows the placement rules", ErrCannotFit, want, t.Slots)
}

// keepSets lists the subsets of current that the wish could keep (no profile kept
// more often than wanted), largest first, then in the order of current.
func keepSets(current Geometry, need map[string]int) []Geometry {
	var cands Geometry
	for _, in := range current {
		if need[in.Profile] > 0 {
			cands = append(cands, in)
		}
	}
	var sets []Geometry
	for mask := 0; mask < 1<<len(cands); mask++ {
		var set Geometry
		counts := map[string]int{}
		ok := true
		for i, in := range cands {
			if mask&(1<<i) == 0 {
				continue
			}
			if counts[in.Profile]++; counts[in.Profile] > need[in.Profile] {
				ok = false
				break
			}
			set = append(set, in)
		}
		if ok {
			sets = append(sets, set)
		}
	}
	sort.SliceStable(sets, func(i, j int) bool { return len(sets[i]) > len(sets[j]) })
	return sets
}

// completeLayout places what the wish needs beyond keep, by backtracking over
// legal starts, largest profiles first.
func completeLayout(t Table, keep Geometry, need map[string]int) (Geometry, bool) {
	var used uint64
	left := map[string]int{}
	for name, n := range need {
		left[name] = n
	}
	for _, in := range keep {
		p, _ := t.Profile(in.Profile)
		used |= span(in.Start, p.Size)
		left[in.Profile]--
	}
	var todo []Profile
	for _, name := range slices.Sorted(maps.Keys(left)) {
		p, _ := t.Profile(name)
		for k := 0; k < left[name]; k++ {
			todo = append(todo, p)
		}
	}
	sort.SliceStable(todo, func(i, j int) bool { return todo[i].Size > todo[j].Size })
	out := append(Geometry(nil), keep...)
	var place func(k, minStart int) bool
	place = func(k, minStart int) bool {
		if k == len(todo) {
			return true
		}
		p := todo[k]
		for _, s := range p.Starts {
			if s < minStart || used&span(s, p.Size) != 0 {
				continue
			}
			used |= span(s, p.Size)
			out = append(out, Instance{Profile: p.Name, Start: s})
			// Identical instances are interchangeable: the next one starts later.
			next := 0
			if k+1 < len(todo) && todo[k+1].Name == p.Name {
				next = s + 1
			}
			if place(k+1, next) {
				return true
			}
			out = out[:len(out)-1]
			used &^= span(s, p.Size)
		}
		return false
	}
	if !place(0, 0) {
		return nil, false
	}
	return out, true
}
