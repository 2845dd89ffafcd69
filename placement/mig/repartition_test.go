package mig

import (
	"reflect"
	"slices"
	"testing"
)

func TestKnownTablesFollowTheA100Grid(t *testing.T) {
	got, ok := KnownTable("NVIDIA A100-SXM4-40GB")
	if !ok {
		t.Fatal("A100-SXM4-40GB has no table")
	}
	want := a100()
	if len(got.Profiles) != len(want.Profiles) || got.Slots != want.Slots {
		t.Fatalf("table %+v, want %+v", got, want)
	}
	for i, p := range got.Profiles {
		w := want.Profiles[i]
		if p.Name != w.Name || p.Size != w.Size || !slices.Equal(p.Starts, w.Starts) || p.limit() != w.limit() {
			t.Errorf("profile %d: %+v, want %+v", i, p, w)
		}
	}
	for _, model := range []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA B200"} {
		tab, ok := KnownTable(model)
		if !ok || tab.Check() != nil {
			t.Errorf("%s: table %v, check %v", model, ok, tab.Check())
		}
	}
	if _, ok := KnownTable("NVIDIA L40S"); ok {
		t.Error("a card without MIG has a table")
	}
}

func TestRepartition(t *testing.T) {
	for _, tc := range []struct {
		name     string
		current  Geometry
		demand   []string
		ok       bool
		profiles []string
		served   []int
	}{
		{"an empty card takes what is demanded, in order, while it fits", nil,
			[]string{"3g.20gb", "3g.20gb", "2g.10gb"}, true, []string{"3g.20gb", "3g.20gb"}, []int{0, 1}},
		{"a smaller later wish fills the room a larger one left", nil,
			[]string{"4g.20gb", "4g.20gb", "2g.10gb", "1g.5gb"}, true, []string{"1g.5gb", "2g.10gb", "4g.20gb"}, []int{0, 2, 3}},
		{"current instances that still fit are kept beside the new ones",
			Geometry{{"3g.20gb", 0}, {"1g.5gb", 4}}, []string{"2g.10gb"}, true, []string{"1g.5gb", "2g.10gb", "3g.20gb"}, []int{0}},
		{"current instances give way to the demand when the card is full",
			Geometry{{"7g.40gb", 0}}, []string{"3g.20gb"}, true, []string{"3g.20gb"}, []int{0}},
		{"a profile the table lacks is no reason to change the card", nil, []string{"3g.40gb"}, false, nil, nil},
		{"nothing fits beside nothing: a whole-card wish on an empty card still plans", nil, []string{"7g.40gb"}, true, []string{"7g.40gb"}, []int{0}},
		{"a layout that holds the same profiles is no change",
			Geometry{{"3g.20gb", 4}}, []string{"3g.20gb"}, true, []string{"3g.20gb", "3g.20gb"}, []int{0}},
		{"no demand, no plan", Geometry{{"3g.20gb", 4}}, nil, false, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := Repartition(a100(), tc.current, tc.demand)
			if ok != tc.ok || !reflect.DeepEqual(c.Profiles, tc.profiles) || !reflect.DeepEqual(c.Served, tc.served) {
				t.Fatalf("got %v %v served %v, want %v %v served %v", ok, c.Profiles, c.Served, tc.ok, tc.profiles, tc.served)
			}
			if ok {
				if err := a100().Validate(c.Layout); err != nil {
					t.Fatalf("layout %v: %v", c.Layout, err)
				}
				var names []string
				for _, in := range c.Layout {
					names = append(names, in.Profile)
				}
				slices.Sort(names)
				if !slices.Equal(names, c.Profiles) {
					t.Fatalf("layout %v does not hold %v", c.Layout, c.Profiles)
				}
			}
		})
	}
}
