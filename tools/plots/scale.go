package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// podsBoundSVG: one make scale run, pods bound against seconds since the first submit,
// one line per scheduler.
func podsBoundSVG(data, run string) ([]byte, error) {
	rs, err := loadScale(data, run, scaleModes)
	if err != nil {
		return nil, err
	}
	first := rs[0]
	p := plot.New()
	styled(p, fmt.Sprintf("Pods bound over time: %d kwok nodes, %s pods submitted in one burst", first.Nodes, thousands(first.PodsSubmitted)),
		"seconds since the first job was submitted", "pods bound")
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -4, 6
	p.Legend.Padding = 2
	xmax := 0.0
	for _, r := range rs {
		pts := make(plotter.XYs, len(r.BoundBySecond))
		for i, n := range r.BoundBySecond {
			pts[i] = plotter.XY{X: float64(i), Y: float64(n)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = schedulerColour[r.Mode], 2
		if r.Mode == "floor" {
			l.Dashes = []vg.Length{5, 3}
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s: %.1f pods/s, last bind at %.0f s", schedulerLabel[r.Mode], r.PodsPerSecond, r.Seconds), l)
		xmax = math.Max(xmax, float64(len(r.BoundBySecond)-1))
	}
	all, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(first.PodsSubmitted)}, {X: xmax, Y: float64(first.PodsSubmitted)}})
	if err != nil {
		return nil, err
	}
	all.Color, all.Width, all.Dashes = grey, 0.75, []vg.Length{1, 2}
	p.Add(all)
	p.Legend.Add("pods submitted", all)
	p.X.Min, p.Y.Min = 0, 0
	p.Y.Max = float64(first.PodsSubmitted) * 1.05
	p.Y.Tick.Marker = commaTicks{}
	return plotSVG(p, 620, 360, runFootnote(run, rs)...), nil
}

// schedulerSVG: one make scale run, each scheduler's CPU time and resident memory,
// read from /proc once a second while the burst was placed.
func schedulerSVG(data, run string) ([]byte, error) {
	rs, err := loadScale(data, run, scaleModes)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if len(r.Samples) == 0 {
			return nil, dataError(filepath.Join(data, run, r.Mode+".json"), "no Samples of the scheduler's CPU and memory")
		}
	}
	cpu, rss := plot.New(), plot.New()
	styled(cpu, "Scheduler CPU time", "seconds since the first job was submitted", "CPU seconds")
	styled(rss, "Scheduler resident memory", "seconds since the first job was submitted", "MiB")
	for _, p := range []*plot.Plot{cpu, rss} {
		p.Add(plotter.NewGrid())
		p.X.Min, p.Y.Min = 0, 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = 4, -2
		p.Y.Tick.Marker = commaTicks{}
	}
	for _, r := range rs {
		c, m := make(plotter.XYs, len(r.Samples)), make(plotter.XYs, len(r.Samples))
		for i, s := range r.Samples {
			c[i] = plotter.XY{X: s.Seconds, Y: s.CPU}
			m[i] = plotter.XY{X: s.Seconds, Y: s.RSSMiB}
		}
		for _, pair := range []struct {
			p   *plot.Plot
			xys plotter.XYs
			txt string
		}{{cpu, c, fmt.Sprintf("%s: %.0f s", r.Mode, r.SchedulerCPU)}, {rss, m, fmt.Sprintf("%s: peak %.0f MiB", r.Mode, r.PeakRSSMiB)}} {
			l, err := plotter.NewLine(pair.xys)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = schedulerColour[r.Mode], 2
			if r.Mode == "floor" {
				l.Dashes = []vg.Length{5, 3}
			}
			pair.p.Add(l)
			pair.p.Legend.Add(pair.txt, l)
		}
	}
	foot := append(runFootnote(run, rs)[:2], "The scheduler process's user + system CPU and its RSS, read from /proc once a second from when the jobs were all submitted.")
	return render(760, 300, foot, func(c draw.Canvas) {
		half := (c.Max.X - c.Min.X) / 2
		cpu.Draw(draw.Crop(c, 4, -half-4, 0, -6))
		rss.Draw(draw.Crop(c, half+4, -8, 0, -6))
	}), nil
}

// cardsSVG: per make scale run, the cards each card-aware scheduler used against the
// packing lower bound of what its bound pods asked for.
func cardsSVG(data string) ([]byte, error) {
	var runs [][]*scaleResult
	var errs []error
	for _, run := range scaleRuns {
		rs, err := loadScale(data, run, []string{"deviceshare", "tessera"})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		runs = append(runs, rs)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := plot.New()
	styled(p, "Cards in use at the end of the burst, against the lower bound", "", "cards")
	p.Add(plotter.NewGrid())
	bars := &cardBars{runs: runs}
	p.Add(bars)
	p.X.Min, p.X.Max = -0.6, float64(len(runs))-0.4
	p.Y.Min = 0
	p.Y.Tick.Marker = commaTicks{}
	p.X.Tick.Marker = bars
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = 6, -4
	p.Legend.Padding = 3
	for _, m := range []string{"deviceshare", "tessera"} {
		p.Legend.Add(schedulerLabel[m]+": cards holding an assignment", swatch{schedulerColour[m]})
	}
	p.Legend.Add("lower bound: max(⌈Σ cores ÷ 100⌉, ⌈Σ MiB ÷ card MiB⌉) of the bound pods", boundMark{})
	foot := []string{"Each scheduler's lower bound is of the pods it bound; cards in use are those holding any assignment when the burst ended."}
	for i, run := range scaleRuns {
		foot = append(foot, fmt.Sprintf("docs/data/%s: make scale, %s, %s.", run, runs[i][0].StartedAt.UTC().Format("2006-01-02"), runs[i][0].Machine))
	}
	return plotSVG(p, 620, 380, foot...), nil
}

// cardBars draws, per run, one bar per scheduler (cards in use) with its lower bound
// as a black line across it and the ratio above.
type cardBars struct{ runs [][]*scaleResult }

const barWidth = 0.34

func (b *cardBars) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	label := textStyle(sans, 9, black, draw.XCenter, draw.YBottom)
	for i, rs := range b.runs {
		for j, r := range rs {
			x0 := float64(i) + (float64(j)-float64(len(rs))/2)*barWidth
			x1 := x0 + barWidth*0.92
			y := float64(r.CardsInUse)
			c.FillPolygon(schedulerColour[r.Mode], rect(tx(x0), ty(0), tx(x1), ty(y)))
			lb := ty(float64(r.LowerBound))
			c.StrokeLine2(draw.LineStyle{Color: black, Width: 2}, tx(x0)-3, lb, tx(x1)+3, lb)
			c.FillText(label, vg.Point{X: (tx(x0) + tx(x1)) / 2, Y: ty(y) + 3},
				fmt.Sprintf("%s (%.2f×)", thousands(r.CardsInUse), float64(r.CardsInUse)/float64(r.LowerBound)))
		}
	}
}

func (b *cardBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	for _, rs := range b.runs {
		for _, r := range rs {
			ymax = math.Max(ymax, float64(r.CardsInUse))
		}
	}
	return -0.5, float64(len(b.runs)) - 0.5, 0, ymax * 1.25
}

// Ticks names each run under its bars.
func (b *cardBars) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for i, rs := range b.runs {
		ts = append(ts, plot.Tick{Value: float64(i), Label: fmt.Sprintf("%d nodes, %s pods", rs[0].Nodes, thousands(rs[0].PodsSubmitted))})
	}
	return ts
}

// swatch is a legend entry of a filled square.
type swatch struct{ clr color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.clr, rect(c.Min.X, c.Min.Y, c.Max.X, c.Max.Y))
}

// boundMark is the legend entry of the lower bound's line.
type boundMark struct{}

func (boundMark) Thumbnail(c *draw.Canvas) {
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(draw.LineStyle{Color: black, Width: 2}, c.Min.X, y, c.Max.X, y)
}

func rect(x0, y0, x1, y1 vg.Length) []vg.Point {
	return []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}
}

// runFootnote says where a make scale run came from.
func runFootnote(run string, rs []*scaleResult) []string {
	r := rs[0]
	load := 0.0
	for _, x := range rs {
		load = math.Max(load, x.LoadMean)
	}
	return []string{
		fmt.Sprintf("docs/data/%s: make scale, %d kwok nodes, %d jobs in one burst, started %s UTC; a fresh cluster per scheduler.",
			run, r.Nodes, r.Jobs, r.StartedAt.UTC().Format("2006-01-02 15:04")),
		fmt.Sprintf("%s, shared with other work (load average up to %.0f): the pace is the whole control plane's on that machine;", r.Machine, load),
		"compare the schedulers within one run.",
	}
}

// commaTicks are gonum's default ticks with thousands separated.
type commaTicks struct{}

func (commaTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" && ts[i].Value == math.Trunc(ts[i].Value) {
			ts[i].Label = thousands(int(ts[i].Value))
		}
	}
	return ts
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
