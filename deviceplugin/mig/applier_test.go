package mig

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
	planner "github.com/tessera-gpu/tessera/placement/mig"
)

// shape is a compute instance without its IDs and UUID: what a rollback must
// restore. NVML, not the caller, numbers GPU instances and names MIG devices.
type shape struct {
	Profile     string
	Start, Size int
}

// shapes lists card 0's compute instances in start order.
func shapes(m *nvmlfake.Machine) []shape {
	var out []shape
	for _, s := range m.MIGInstances(0) {
		out = append(out, shape{s.Profile, s.Start, s.Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func uuidAt(t *testing.T, m *nvmlfake.Machine, start int) string {
	t.Helper()
	for _, s := range m.MIGInstances(0) {
		if s.Start == start {
			return s.UUID
		}
	}
	t.Fatalf("no instance starts at %d", start)
	return ""
}

// a100With returns an A100-SXM4-40GB carrying 3g.20gb at 0, 2g.10gb at 4 and
// 1g.5gb at 6, built through the applier itself.
func a100With(t *testing.T) (*nvmlfake.Machine, *Card) {
	t.Helper()
	m := nvmlfake.MIGCards(nvmlfake.A100SXM4x40GB())
	c, err := Open(m.Devices[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(planner.Geometry{{Profile: "3g.20gb", Start: 0}, {Profile: "2g.10gb", Start: 4}, {Profile: "1g.5gb", Start: 6}}); err != nil {
		t.Fatalf("building the starting layout: %v", err)
	}
	return m, c
}

// plan asks the planner for a layout holding want, from what the card reports.
func plan(t *testing.T, c *Card, want ...string) planner.Geometry {
	t.Helper()
	table, err := c.Table()
	if err != nil {
		t.Fatal(err)
	}
	current, err := c.Geometry()
	if err != nil {
		t.Fatal(err)
	}
	g, err := planner.Plan(table, current, want)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestApplyReachesThePlanAndKeepsWhatItKeeps(t *testing.T) {
	m, c := a100With(t)
	if got := shapes(m); !reflect.DeepEqual(got, []shape{{"3g.20gb", 0, 4}, {"2g.10gb", 4, 2}, {"1g.5gb", 6, 1}}) {
		t.Fatalf("starting layout %v", got)
	}
	kept := uuidAt(t, m, 0)
	g := plan(t, c, "3g.20gb", "3g.20gb")
	if err := c.Apply(g); err != nil {
		t.Fatal(err)
	}
	if got := shapes(m); !reflect.DeepEqual(got, []shape{{"3g.20gb", 0, 4}, {"3g.20gb", 4, 4}}) {
		t.Fatalf("layout %v, want two 3g.20gb", got)
	}
	if uuidAt(t, m, 0) != kept {
		t.Error("the kept 3g.20gb at 0 was recreated")
	}
	// Emptying the card destroys every instance.
	if err := c.Apply(nil); err != nil || m.MIGGPUInstances(0) != 0 {
		t.Fatalf("emptying: %v, %d GPU instances left", err, m.MIGGPUInstances(0))
	}
}

// A step that fails part-way is undone: the card ends as it began, the instance the
// plan kept untouched, and the error names the NVML failure.
func TestAFailureMidPlanIsRolledBackExactly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault nvmlfake.MIGFault
	}{
		{"the second GPU instance cannot be created", nvmlfake.MIGFault{Op: nvmlfake.OpCreateGpuInstance, Skip: 1, Ret: nvml.ERROR_UNKNOWN}},
		{"the first new compute instance cannot be created", nvmlfake.MIGFault{Op: nvmlfake.OpCreateComputeInstance, Ret: nvml.ERROR_INSUFFICIENT_RESOURCES}},
		{"the second GPU instance to go cannot be destroyed", nvmlfake.MIGFault{Op: nvmlfake.OpDestroyGpuInstance, Skip: 1, Ret: nvml.ERROR_IN_USE}},
		{"a compute instance cannot be destroyed", nvmlfake.MIGFault{Op: nvmlfake.OpDestroyComputeInstance, Skip: 1, Ret: nvml.ERROR_IN_USE}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, c := a100With(t)
			before, kept := shapes(m), uuidAt(t, m, 0)
			// Keeps 3g at 0, destroys 2g at 4 and 1g at 6, creates 1g.10gb at 4 and 6.
			g := planner.Geometry{{Profile: "3g.20gb", Start: 0}, {Profile: "1g.10gb", Start: 4}, {Profile: "1g.10gb", Start: 6}}
			m.InjectMIGFault(0, tc.fault)
			err := c.Apply(g)
			if err == nil || errors.Is(err, ErrRollback) || !errors.Is(err, ErrNVML) || !strings.Contains(err.Error(), "restored") {
				t.Fatalf("got %v, want an NVML failure with the previous layout restored", err)
			}
			if got := shapes(m); !reflect.DeepEqual(got, before) {
				t.Fatalf("layout after rollback %v, want %v", got, before)
			}
			if uuidAt(t, m, 0) != kept {
				t.Error("the instance the plan kept was touched")
			}
			// The card still works: the same plan now succeeds.
			if err := c.Apply(g); err != nil {
				t.Fatalf("retry: %v", err)
			}
		})
	}
}

func TestARollbackThatFailsSaysSo(t *testing.T) {
	m, c := a100With(t)
	// The first create fails (the plan's 7g), and so does re-creating the first
	// instance the rollback puts back.
	m.InjectMIGFault(0, nvmlfake.MIGFault{Op: nvmlfake.OpCreateGpuInstance, Ret: nvml.ERROR_UNKNOWN})
	m.InjectMIGFault(0, nvmlfake.MIGFault{Op: nvmlfake.OpCreateGpuInstance, Ret: nvml.ERROR_UNKNOWN})
	err := c.Apply(planner.Geometry{{Profile: "7g.40gb", Start: 0}})
	if !errors.Is(err, ErrRollback) {
		t.Fatalf("got %v, want ErrRollback", err)
	}
}

// A process on the card or on one of its MIG devices makes the applier refuse before
// it changes anything.
func TestABusyCardIsRefusedAndUntouched(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy func(*nvmlfake.Machine)
	}{
		{"a process on a MIG device", func(m *nvmlfake.Machine) {
			m.SetMIGProcesses(m.MIGInstances(0)[2].UUID, []nvml.ProcessInfo{{Pid: 4242}})
		}},
		{"a process on the card", func(m *nvmlfake.Machine) { m.SetProcesses(0, []nvml.ProcessInfo{{Pid: 77}}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, c := a100With(t)
			before := m.MIGInstances(0)
			tc.busy(m)
			err := c.Apply(planner.Geometry{{Profile: "7g.40gb", Start: 0}})
			if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "pids") {
				t.Fatalf("got %v, want ErrBusy naming the processes", err)
			}
			if got := m.MIGInstances(0); !reflect.DeepEqual(got, before) {
				t.Fatalf("a busy card changed: %v, was %v", got, before)
			}
		})
	}
}

func TestApplyRefusesWhatCannotBe(t *testing.T) {
	m, c := a100With(t)
	before := m.MIGInstances(0)
	err := c.Apply(planner.Geometry{{Profile: "3g.20gb", Start: 0}, {Profile: "2g.10gb", Start: 2}})
	if !errors.Is(err, planner.ErrInvalid) || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("an overlapping plan: got %v", err)
	}
	if !reflect.DeepEqual(m.MIGInstances(0), before) {
		t.Fatal("an invalid plan changed the card")
	}
	off := nvmlfake.NewMachine([]nvmlfake.CardSpec{{Name: "A100", MemoryMiB: 40960, MIGModel: ptr(nvmlfake.A100SXM4x40GB())}})
	if _, err := Open(off.Devices[0]); !errors.Is(err, ErrNotMIG) {
		t.Fatalf("a card with MIG off: got %v, want ErrNotMIG", err)
	}
}

func TestTheTableReadFromNVMLIsThePlannersA100(t *testing.T) {
	_, c := a100With(t)
	table, err := c.Table()
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Check(); err != nil || table.Slots != 8 || len(table.Profiles) != 7 {
		t.Fatalf("table %+v (%v)", table, err)
	}
	three, ok := table.Profile("3g.20gb")
	if !ok || three.Size != 4 || !reflect.DeepEqual(three.Starts, []int{0, 4}) || three.Max != 2 {
		t.Fatalf("3g.20gb reads as %+v", three)
	}
}

func ptr[T any](v T) *T { return &v }
