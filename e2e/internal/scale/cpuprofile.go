package scale

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// A CPUPart is one row of the CPU-per-pod breakdown: the samples with a frame whose
// function name starts with one of Prefixes. Parts nest (Within names the part a row
// is inside of) and top-level parts may overlap: a garbage-collector assist is counted
// under GC and under the code whose allocation triggered it.
type CPUPart struct {
	Name     string
	Within   string
	Prefixes []string
}

// CPUParts are the rows of the breakdown, in the order they are printed.
var CPUParts = []CPUPart{
	{Name: "Volcano nodeorder (Kubernetes' scorers)", Prefixes: []string{"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder."}},
	{Name: "per-pod request sums (resource.PodRequests)", Within: "Volcano nodeorder (Kubernetes' scorers)",
		Prefixes: []string{"k8s.io/component-helpers/resource.PodRequests"}},
	{Name: "Volcano binpack", Prefixes: []string{"volcano.sh/volcano/pkg/scheduler/plugins/binpack."}},
	{Name: "Volcano predicate loop (all plugins)", Prefixes: []string{"volcano.sh/volcano/pkg/scheduler/util.(*predicateHelper).PredicateNodes"}},
	{Name: "Volcano predicates (Kubernetes' filters)", Within: "Volcano predicate loop (all plugins)",
		Prefixes: []string{"volcano.sh/volcano/pkg/scheduler/plugins/predicates."}},
	{Name: "Tessera vgpu plugin, all hooks", Prefixes: []string{"github.com/tessera-gpu/tessera/"}},
	{Name: "vgpu predicate", Within: "Tessera vgpu plugin, all hooks",
		Prefixes: []string{"github.com/tessera-gpu/tessera/plugins/vgpu.(*vgpuPlugin).predicate"}},
	{Name: "vgpu node order", Within: "Tessera vgpu plugin, all hooks",
		Prefixes: []string{"github.com/tessera-gpu/tessera/plugins/vgpu.(*vgpuPlugin).nodeOrder"}},
	{Name: "Garbage collector (marking and assists)", Prefixes: []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc"}},
}

// The part a pod's cost without Tessera's own code leaves out.
const tesseraPart = "Tessera vgpu plugin, all hooks"

// CPUProfile is the live scheduler's CPU profiles of one run merged: the span they
// cover and the seconds sampled in each part.
type CPUProfile struct {
	Start, End time.Time
	Total      float64 // seconds sampled
	Parts      map[string]float64
	Rest       float64 // seconds in no top-level part
}

// ReadCPUProfiles merges the cpu-NN.pprof files that -profile left in dir (not the
// restart profile). It returns nil, nil when there are none.
func ReadCPUProfiles(dir string) (*CPUProfile, error) {
	files, err := filepath.Glob(filepath.Join(dir, "cpu-*.pprof"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, nil
	}
	sort.Strings(files)
	out := &CPUProfile{Parts: map[string]float64{}}
	for _, f := range files {
		p, err := readProfile(f)
		if err != nil {
			return nil, err
		}
		if err := out.add(p); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return out, nil
}

func readProfile(file string) (*profile.Profile, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// add counts one profile's samples into the parts and widens the span.
func (c *CPUProfile) add(p *profile.Profile) error {
	col := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			col = i
		}
	}
	if col < 0 {
		return fmt.Errorf("not a CPU profile (no cpu/nanoseconds sample type)")
	}
	start := time.Unix(0, p.TimeNanos)
	end := start.Add(time.Duration(p.DurationNanos))
	if c.Start.IsZero() || start.Before(c.Start) {
		c.Start = start
	}
	if end.After(c.End) {
		c.End = end
	}
	for _, s := range p.Sample {
		secs := float64(s.Value[col]) / 1e9
		c.Total += secs
		top := false
		for _, part := range CPUParts {
			if sampleMatches(s, part.Prefixes) {
				c.Parts[part.Name] += secs
				top = top || part.Within == ""
			}
		}
		if !top {
			c.Rest += secs
		}
	}
	return nil
}

func sampleMatches(s *profile.Sample, prefixes []string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			for _, pre := range prefixes {
				if strings.HasPrefix(line.Function.Name, pre) {
					return true
				}
			}
		}
	}
	return false
}

// boundWithin counts the bind times in [start, end].
func boundWithin(boundAt map[string]time.Time, start, end time.Time) int {
	n := 0
	for _, t := range boundAt {
		if !t.Before(start) && !t.After(end) {
			n++
		}
	}
	return n
}

// WriteCPUPerPod prints, for the results whose scheduler was profiled, the CPU the
// scheduler spent per pod it bound while the profiles ran, part by part, side by side
// with the floor's. dir holds each scheduler's run directory (<dir>/<mode>).
func WriteCPUPerPod(w io.Writer, dir string, rs []*Result) error {
	type col struct {
		r *Result
		p *CPUProfile
	}
	var cols []col
	for _, r := range rs {
		if r.ProfiledPods == 0 {
			continue
		}
		p, err := ReadCPUProfiles(filepath.Join(dir, string(r.Mode)))
		if err != nil {
			return err
		}
		if p != nil {
			cols = append(cols, col{r, p})
		}
	}
	if len(cols) == 0 {
		return nil
	}
	perPod := func(c col, secs float64) float64 { return secs * 1000 / float64(c.r.ProfiledPods) }
	var floor *col
	for i := range cols {
		if cols[i].r.Mode == Floor {
			floor = &cols[i]
		}
	}
	fmt.Fprintf(w, "Scheduler CPU per pod bound while it was profiled (ms; parts may overlap, see docs/benchmarks.md)\n\n")
	fmt.Fprintf(w, "| |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.r.Mode)
	}
	fmt.Fprintf(w, "\n|---|")
	for range cols {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	row := func(name string, v func(col) float64) {
		fmt.Fprintf(w, "| %s |", name)
		for _, c := range cols {
			s := fmt.Sprintf("%.2f", v(c))
			switch {
			case v(c) == 0:
				s = "—" // nothing sampled there (the floor runs no vgpu plugin)
			case floor != nil && c.r.Mode != Floor:
				if f := v(*floor); f > 0 {
					s += fmt.Sprintf(" (%.2f×)", v(c)/f)
				}
			}
			fmt.Fprintf(w, " %s |", s)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| pods bound in the profiled %s |", "span")
	for _, c := range cols {
		fmt.Fprintf(w, " %d in %.0f s |", c.r.ProfiledPods, c.p.End.Sub(c.p.Start).Seconds())
	}
	fmt.Fprintln(w)
	row("**all of the scheduler**", func(c col) float64 { return perPod(c, c.p.Total) })
	for _, part := range CPUParts {
		name := part.Name
		if part.Within != "" {
			name = "– " + name
		}
		row(name, func(c col) float64 { return perPod(c, c.p.Parts[part.Name]) })
	}
	row("everything else", func(c col) float64 { return perPod(c, c.p.Rest) })
	if floor == nil {
		return nil
	}
	f := perPod(*floor, floor.p.Total)
	for _, c := range cols {
		if c.r.Mode != Tessera || f == 0 {
			continue
		}
		all := perPod(c, c.p.Total)
		own := perPod(c, c.p.Parts[tesseraPart])
		fmt.Fprintf(w, "\nTessera: %.2f ms per pod, %.2f× the floor's; its plugin's own hooks %.2f ms. Without them: %.2f ms, %.2f× the floor's.\n",
			all, all/f, own, all-own, (all-own)/f)
	}
	return nil
}
