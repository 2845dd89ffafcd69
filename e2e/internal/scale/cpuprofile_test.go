package scale

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// fakeCPUProfile builds a CPU profile as the Go runtime writes one: each stack is
// listed leaf first, with the CPU nanoseconds spent in it.
func fakeCPUProfile(start time.Time, window time.Duration, stacks map[string]int64) *profile.Profile {
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        10_000_000,
		TimeNanos:     start.UnixNano(),
		DurationNanos: int64(window),
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	for stack, ns := range stacks {
		var sample profile.Sample
		for _, name := range strings.Split(stack, ";") {
			loc, ok := locs[name]
			if !ok {
				fn := &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
				funcs[name] = fn
				p.Function = append(p.Function, fn)
				loc = &profile.Location{ID: uint64(len(locs) + 1), Line: []profile.Line{{Function: fn}}}
				locs[name] = loc
				p.Location = append(p.Location, loc)
			}
			sample.Location = append(sample.Location, loc)
		}
		sample.Value = []int64{ns / 10_000_000, ns}
		p.Sample = append(p.Sample, &sample)
	}
	return p
}

func writeProfile(t *testing.T, file string, p *profile.Profile) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
}

const (
	scoreStack   = "k8s.io/component-helpers/resource.PodRequests;volcano.sh/volcano/pkg/scheduler/plugins/nodeorder.(*NodeOrderPlugin).NodeOrderFn;volcano.sh/volcano/pkg/scheduler/framework.(*Session).NodeOrderMapFn"
	vgpuStack    = "github.com/tessera-gpu/tessera/placement.ScorePod;github.com/tessera-gpu/tessera/plugins/vgpu.(*vgpuPlugin).predicate;volcano.sh/volcano/pkg/scheduler/framework.(*Session).PredicateFn;volcano.sh/volcano/pkg/scheduler/util.(*predicateHelper).PredicateNodes.func1"
	assistStack  = "runtime.gcAssistAlloc;runtime.mallocgc;volcano.sh/volcano/pkg/scheduler/plugins/nodeorder.(*NodeOrderPlugin).NodeOrderFn"
	elsewhere    = "encoding/json.Unmarshal;k8s.io/client-go/rest/watch.(*Decoder).Decode"
	restartStack = "volcano.sh/volcano/pkg/scheduler.(*Scheduler).runOnce"
)

func TestCPUProfilesAreSplitIntoPartsAndSpan(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	writeProfile(t, filepath.Join(dir, "cpu-00.pprof"), fakeCPUProfile(t0, time.Minute,
		map[string]int64{scoreStack: 3e9, vgpuStack: 1e9}))
	writeProfile(t, filepath.Join(dir, "cpu-01.pprof"), fakeCPUProfile(t0.Add(time.Minute), time.Minute,
		map[string]int64{assistStack: 2e9, elsewhere: 5e8}))
	// The restart profile is of another phase and must not be counted.
	writeProfile(t, filepath.Join(dir, "restart-cpu.pprof"), fakeCPUProfile(t0.Add(time.Hour), 15*time.Second,
		map[string]int64{restartStack: 9e9}))

	cp, err := ReadCPUProfiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !cp.Start.Equal(t0) || !cp.End.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("span %v .. %v, want the two minutes of cpu-00 and cpu-01", cp.Start, cp.End)
	}
	want := map[string]float64{
		"Volcano nodeorder (Kubernetes' scorers)":     5, // the scorer and the assist inside it
		"per-pod request sums (resource.PodRequests)": 3,
		"Volcano predicate loop (all plugins)":        1,
		"Tessera vgpu plugin, all hooks":              1,
		"vgpu predicate":                              1,
		"Garbage collector (marking and assists)":     2,
		"Volcano binpack":                             0,
		"Volcano predicates (Kubernetes' filters)":    0,
		"vgpu node order":                             0,
	}
	for name, secs := range want {
		if got := cp.Parts[name]; math.Abs(got-secs) > 1e-9 {
			t.Errorf("%s: %.2f s, want %.2f", name, got, secs)
		}
	}
	if math.Abs(cp.Total-6.5) > 1e-9 || math.Abs(cp.Rest-0.5) > 1e-9 {
		t.Errorf("total %.2f s, rest %.2f s; want 6.5 and 0.5 (the watch decode alone)", cp.Total, cp.Rest)
	}
	for _, part := range CPUParts {
		if _, ok := want[part.Name]; !ok {
			t.Errorf("part %q is not covered by this test", part.Name)
		}
	}
}

func TestReadCPUProfilesWithoutProfiles(t *testing.T) {
	cp, err := ReadCPUProfiles(t.TempDir())
	if err != nil || cp != nil {
		t.Fatalf("got %v, %v; want nothing and no error", cp, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cpu-00.pprof"), []byte("not a profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCPUProfiles(dir); err == nil || !strings.Contains(err.Error(), "cpu-00.pprof") {
		t.Fatalf("a broken profile gave %v; want an error naming the file", err)
	}
}

func TestBoundWithinCountsTheSpanInclusive(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	bound := map[string]time.Time{"a": t0.Add(-time.Second), "b": t0, "c": t0.Add(time.Minute), "d": t0.Add(2 * time.Minute),
		"e": t0.Add(2*time.Minute + time.Nanosecond)}
	if n := boundWithin(bound, t0, t0.Add(2*time.Minute)); n != 3 {
		t.Fatalf("%d pods in the span, want 3 (b, c, d)", n)
	}
}

func TestWriteCPUPerPodSetsTesseraBesideTheFloor(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	for m, stacks := range map[Mode]map[string]int64{
		Floor:   {scoreStack: 10e9},
		Tessera: {scoreStack: 10e9, vgpuStack: 2e9},
	} {
		if err := os.MkdirAll(filepath.Join(dir, string(m)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeProfile(t, filepath.Join(dir, string(m), "cpu-00.pprof"), fakeCPUProfile(t0, time.Minute, stacks))
	}
	rs := []*Result{{Mode: Floor, ProfiledPods: 1000}, {Mode: Tessera, ProfiledPods: 1000},
		{Mode: DeviceShare}} // not profiled: no column
	var b strings.Builder
	if err := WriteCPUPerPod(&b, dir, rs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| | floor | tessera |",
		"| **all of the scheduler** | 10.00 | 12.00 (1.20×) |",
		"| – vgpu predicate | — | 2.00 |",
		"Tessera: 12.00 ms per pod, 1.20× the floor's; its plugin's own hooks 2.00 ms. Without them: 10.00 ms, 1.00× the floor's.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "deviceshare") {
		t.Errorf("an unprofiled scheduler got a column:\n%s", out)
	}

	b.Reset()
	if err := WriteCPUPerPod(&b, dir, []*Result{{Mode: Floor}, {Mode: Tessera}}); err != nil || b.Len() != 0 {
		t.Fatalf("unprofiled runs printed %q, %v; want nothing", b.String(), err)
	}
}

func TestRestartRowTellsAdmissionFromPlacing(t *testing.T) {
	rs := []*Result{
		{Mode: Floor, RestartJobs: 20, RestartFirst: 5.6, RestartAll: 6.0, RestartCreated: 3.1, RestartPodGroupWrites: 4127},
		{Mode: Tessera, RestartJobs: 20, RestartFirst: -1, RestartAll: -1, RestartCreated: -1},
		{Mode: DeviceShare, RestartJobs: 20, RestartFirst: 9.8, RestartAll: 10.0}, // saved before the figure
	}
	var b strings.Builder
	WriteTable(&b, rs)
	for _, want := range []string{"5.6 s / 6.0 s (20 pods; first created 3.1 s; 4127 PodGroup writes)", "never / never (20 pods; first created never)",
		"9.8 s / 10.0 s (20 pods)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}

func TestCrashRowOnlyForRunsThatCrashed(t *testing.T) {
	var b strings.Builder
	WriteTable(&b, []*Result{{Mode: Floor}, {Mode: Tessera}})
	if strings.Contains(b.String(), "Crash mid-burst") {
		t.Errorf("a crash row without a crash:\n%s", b.String())
	}
	b.Reset()
	WriteTable(&b, []*Result{{Mode: Floor}, {Mode: Tessera, CrashBound: 2771, CrashResumed: 6.4}, {Mode: DeviceShare, CrashBound: 100, CrashResumed: -1}})
	for _, want := range []string{"| Crash mid-burst: pods bound when killed; next bind after its new start | — | 2771; 6.4 s | 100; never |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
