package mig

import "strings"

// The scheduler decides which profiles an idle card should hold without NVML; it
// needs each model's table. These are the seven-compute-slice, eight-memory-slice
// cards (A100, H100, B200): profile names and instance counts from NVIDIA's MIG user
// guide ("Supported MIG Profiles"); placements (1g: any slot 0..6, double-memory 1g
// and 2g: even slots, 3g: 0 or 4, 4g: 0, 7g: 0) from the guide's A100 diagram and
// go-nvml's dgxa100 mock. For A100-80GB, H100 and B200 the same grid is assumed, not
// confirmed. The agent plans the placements again with the table NVML reports, so a
// table here that is wrong costs a refused plan, never a wrong layout.

// sevenSlice builds a table from the names of a model's profiles, in the order 1g,
// 1g+me, double-memory 1g, 2g, 3g, 4g, 7g.
func sevenSlice(names [7]string) Table {
	shapes := []Profile{
		{Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}, Max: 1},
		{Size: 2, Starts: []int{0, 2, 4, 6}},
		{Size: 2, Starts: []int{0, 2, 4}},
		{Size: 4, Starts: []int{0, 4}},
		{Size: 4, Starts: []int{0}},
		{Size: 8, Starts: []int{0}},
	}
	t := Table{Slots: 8}
	for i, p := range shapes {
		p.Name = names[i]
		t.Profiles = append(t.Profiles, p)
	}
	return t
}

// KnownTable returns the profile table of a card model as NVML names it (the
// inventory's model, e.g. "NVIDIA H100 80GB HBM3"), or false for a model Tessera has
// no table for: such cards are never re-partitioned.
func KnownTable(model string) (Table, bool) {
	m := strings.ToUpper(model)
	switch {
	case strings.Contains(m, "A100") && strings.Contains(m, "40GB"):
		return sevenSlice([7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}), true
	case (strings.Contains(m, "A100") || strings.Contains(m, "H100")) && strings.Contains(m, "80GB"):
		return sevenSlice([7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}), true
	case strings.Contains(m, "B200"):
		return sevenSlice([7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}), true
	}
	return Table{}, false
}
