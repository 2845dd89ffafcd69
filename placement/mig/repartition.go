package mig

import (
	"slices"
)

// Choice is the layout Repartition chose for one idle card.
type Choice struct {
	// Profiles is the new layout as a sorted multiset of profile names.
	Profiles []string
	// Layout places Profiles on the card, keeping as many current instances where
	// they are as any layout can (Plan).
	Layout Geometry
	// Served lists the indices of the demand entries the new layout holds.
	Served []int
}

// Repartition chooses, greedily, a new layout for an idle card in MIG mode: it takes
// the demanded profiles in the order given (one entry per wanted instance, most
// urgent first), keeping each one while some layout still holds everything taken so
// far, then adds back the card's current instances, in start order, while they still
// fit. It is not optimal: an early large profile can crowd out several later small
// ones. ok is false when no demanded profile fits the card (or none is in its table),
// or when the layout would hold the same profiles as now.
func Repartition(t Table, current Geometry, demand []string) (Choice, bool) {
	if t.Check() != nil || t.Validate(current) != nil {
		return Choice{}, false
	}
	var c Choice
	var wish []string
	// The wish only grows, so a profile that does not fit beside it once never will:
	// each profile is tried until it fails, and a long queue costs a map lookup a pod.
	full := map[string]bool{}
	for i, name := range demand {
		if full[name] {
			continue
		}
		if _, ok := t.Profile(name); ok && fits(t, append(wish, name)) {
			wish = append(wish, name)
			c.Served = append(c.Served, i)
			continue
		}
		full[name] = true
	}
	if len(c.Served) == 0 {
		return Choice{}, false
	}
	for _, in := range current {
		if fits(t, append(wish, in.Profile)) {
			wish = append(wish, in.Profile)
		}
	}
	slices.Sort(wish)
	now := make([]string, len(current))
	for i, in := range current {
		now[i] = in.Profile
	}
	slices.Sort(now)
	if slices.Equal(wish, now) {
		return Choice{}, false
	}
	g, err := Plan(t, current, wish)
	if err != nil {
		return Choice{}, false // fits said a layout exists; Plan finds one whenever one does
	}
	c.Profiles, c.Layout = wish, g
	return c, true
}

// fits reports whether some layout of the card holds the profiles.
func fits(t Table, profiles []string) bool {
	_, err := Plan(t, nil, profiles)
	return err == nil
}
