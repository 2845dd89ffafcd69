package mig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// a100 is A100-SXM4-40GB's table in NVML's memory slices (see
// internal/testing/nvmlfake/mig_profiles.go for the sources).
func a100() Table {
	return Table{Slots: 8, Profiles: []Profile{
		{Name: "1g.5gb", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}, Max: 7},
		{Name: "1g.5gb+me", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}, Max: 1},
		{Name: "1g.10gb", Size: 2, Starts: []int{0, 2, 4, 6}, Max: 4},
		{Name: "2g.10gb", Size: 2, Starts: []int{0, 2, 4}, Max: 3},
		{Name: "3g.20gb", Size: 4, Starts: []int{0, 4}, Max: 2},
		{Name: "4g.20gb", Size: 4, Starts: []int{0}, Max: 1},
		{Name: "7g.40gb", Size: 8, Starts: []int{0}, Max: 1},
	}}
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current Geometry
		want    []string
		plan    Geometry
		err     error
		text    string
	}{
		{"an empty card takes the whole-card profile", nil, []string{"7g.40gb"}, Geometry{{"7g.40gb", 0}}, nil, ""},
		{"a 4g and a 3g share the card only as 4g at 0 and 3g at 4", nil, []string{"3g.20gb", "4g.20gb"},
			Geometry{{"4g.20gb", 0}, {"3g.20gb", 4}}, nil, ""},
		{"seven 1g instances fill slots 0 to 6", nil, []string{"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"},
			Geometry{{"1g.5gb", 0}, {"1g.5gb", 1}, {"1g.5gb", 2}, {"1g.5gb", 3}, {"1g.5gb", 4}, {"1g.5gb", 5}, {"1g.5gb", 6}}, nil, ""},
		{"a kept 3g at 4 stays and the new 2g goes beside it",
			Geometry{{"3g.20gb", 4}, {"1g.5gb", 0}}, []string{"3g.20gb", "2g.10gb"},
			Geometry{{"2g.10gb", 0}, {"3g.20gb", 4}}, nil, ""},
		{"an instance that blocks the only 4g start is moved, the others kept",
			Geometry{{"1g.5gb", 1}, {"1g.5gb", 5}}, []string{"4g.20gb", "1g.5gb"},
			Geometry{{"4g.20gb", 0}, {"1g.5gb", 5}}, nil, ""},
		{"a wish above the card's slices cannot fit", nil, []string{"4g.20gb", "3g.20gb", "1g.5gb"}, nil, ErrCannotFit, "needs 9 memory slices"},
		{"a 2g at 6 does not exist, so three 2g and a 1g.10gb cannot share the card", nil,
			[]string{"2g.10gb", "2g.10gb", "2g.10gb", "1g.10gb"}, Geometry{{"2g.10gb", 0}, {"2g.10gb", 2}, {"2g.10gb", 4}, {"1g.10gb", 6}}, nil, ""},
		{"two 4g instances exceed the profile's count", nil, []string{"4g.20gb", "4g.20gb"}, nil, ErrCannotFit, "at most 1"},
		{"two media profiles exceed its count", nil, []string{"1g.5gb+me", "1g.5gb+me"}, nil, ErrCannotFit, "1g.5gb+me"},
		{"three 2g and two 1g fit the slice count but no 1g may start at slot 7", nil,
			[]string{"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb", "1g.5gb"}, nil, ErrCannotFit, "no placement of"},
		{"an unknown profile is named", nil, []string{"3g.40gb"}, nil, ErrInvalid, `"3g.40gb"`},
		{"an illegal current layout is refused", Geometry{{"3g.20gb", 2}}, []string{"1g.5gb"}, nil, ErrInvalid, "cannot start at slot 2"},
		{"an overlapping current layout is refused", Geometry{{"3g.20gb", 0}, {"2g.10gb", 2}}, nil, nil, ErrInvalid, "overlaps"},
		{"wanting nothing empties the card", Geometry{{"7g.40gb", 0}}, nil, Geometry{}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Plan(a100(), tc.current, tc.want)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("got %v, %v; want an error wrapping %v containing %q", got, err, tc.err, tc.text)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(tc.plan) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.plan) {
				t.Fatalf("got %v, want %v", got, tc.plan)
			}
		})
	}
}

func TestTableCheckNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table Table
		text  string
	}{
		{"no slots", Table{}, "slots: 0"},
		{"a profile leaving the card", Table{Slots: 8, Profiles: []Profile{{Name: "x", Size: 4, Starts: []int{6}}}}, "start 6 with size 4"},
		{"a repeated profile", Table{Slots: 8, Profiles: []Profile{{Name: "x", Size: 1}, {Name: "x", Size: 1}}}, `"x" is listed twice`},
	} {
		if err := tc.table.Check(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.text)
		}
	}
}
