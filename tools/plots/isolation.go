package main

import (
	"fmt"
	"image/color"
	"regexp"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// isolationData is make isolation-data's file: the SM section of vgpu-core's suite on
// its stub driver.
const isolationData = "vgpu-core-sm.txt"

// smTolerance is the suite's tolerance on the average of three windows, in points.
const smTolerance = 5

// isolationSVG: every SM limiter case of vgpu-core's suite, the share of the card it
// must hold (with the suite's ±5 points) and the share measured.
func isolationSVG(data string) ([]byte, error) {
	cases, config, err := loadSM(data, isolationData)
	if err != nil {
		return nil, err
	}
	rows := &smRows{cases: cases}
	p := plot.New()
	styled(p, "Compute limits: the share of the card each case must hold, and what it held", "% of the card's time", "")
	p.Add(rows)
	p.X.Min, p.X.Max = 0, 100
	p.X.Tick.Marker = plot.ConstantTicks(percentTicks())
	p.Y.Tick.Marker = rows
	p.Y.Tick.Label.Font.Size = 9
	p.Y.Tick.Length = 0
	p.Y.LineStyle.Width = 0
	p.Legend.Top, p.Legend.Left = false, true
	p.Legend.YOffs, p.Legend.Padding = 4, 3
	p.Legend.Add(fmt.Sprintf("target ± %d points (the suite's tolerance)", smTolerance), bandMark{})
	p.Legend.Add("measured: mean of three 0.5 s windows after 2 s", dotMark{})
	if slices.ContainsFunc(cases, func(k smCase) bool { return !k.passed }) {
		p.Legend.Add("a case the suite failed in this run", dotMark{vermilion})
	}
	h := vg.Length(len(cases)+3)*15 + 90
	foot := []string{
		fmt.Sprintf("docs/data/%s: make isolation-data (vgpu-core's suite, make -C vgpu-core test-normal), %s, %s, load average %s.",
			isolationData, day(config["date"]), config["machine"], firstField(config["load"])),
		fmt.Sprintf("The suite: %s%s.", config["suite"], notDrawn(config["failed-elsewhere"])),
		"On vgpu-core's stub driver (time-sliced simulated cards, NVML samples, pid namespaces), not on a GPU: docs/isolation.md says what the stub models.",
	}
	if slices.ContainsFunc(cases, func(k smCase) bool { return !k.passed }) {
		foot = append(foot, "A case fails as inconclusive when the machine stalled the test in too many of its windows.")
	}
	return plotSVG(p, 840, h, foot...), nil
}

// smRows draws one row per case, top to bottom in the suite's order.
type smRows struct{ cases []smCase }

func (r *smRows) y(i int) float64 { return float64(len(r.cases) - 1 - i) }

func (r *smRows) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	value := textStyle(sans, 8, black, draw.XLeft, draw.YCenter)
	for i, k := range r.cases {
		y := ty(r.y(i))
		if i%2 == 0 {
			c.FillPolygon(paleGrey, rect(tx(0), y-7.5, tx(100), y+7.5))
		}
		lo, hi := max(0, k.target-smTolerance), min(100, k.target+smTolerance)
		c.FillPolygon(paleBlue, rect(tx(lo), y-5, tx(hi), y+5))
		c.StrokeLine2(draw.LineStyle{Color: blue, Width: 1.5}, tx(k.target), y-5, tx(k.target), y+5)
		clr := black
		if !k.passed {
			clr = vermilion
		}
		c.DrawGlyph(draw.GlyphStyle{Color: clr, Radius: 3, Shape: draw.CircleGlyph{}}, vg.Point{X: tx(k.measured), Y: y})
		// The figure at the right of the row, or at its left where the band reaches the edge.
		text := fmt.Sprintf("%.1f", k.measured)
		if !k.passed {
			text += " (" + failure(k) + ")"
		}
		if hi >= 100 || !k.passed && k.target > 50 {
			c.FillText(textStyle(sans, 8, black, draw.XRight, draw.YCenter), vg.Point{X: tx(lo) - 4, Y: y}, text)
		} else {
			c.FillText(value, vg.Point{X: tx(hi) + 4, Y: y}, text)
		}
	}
}

func (r *smRows) DataRange() (xmin, xmax, ymin, ymax float64) {
	// Three empty rows under the cases hold the legend.
	return 0, 100, -3.6, float64(len(r.cases)) - 0.4
}

// Ticks labels each row with its case.
func (r *smRows) Ticks(min, max float64) []plot.Tick {
	ts := make([]plot.Tick, len(r.cases))
	for i, k := range r.cases {
		ts[i] = plot.Tick{Value: r.y(i), Label: shortCase(k)}
	}
	return ts
}

var (
	parenthesis = regexp.MustCompile(`\s*\([^)]*\)`)
	holds       = regexp.MustCompile(` holds \d+±\d+% after 2 s$`)
	shorter     = strings.NewReplacer(
		"sm: ", "",
		"in two pid namespaces, driver reports host pids", "two pid namespaces, host pids",
		"in two pid namespaces, driver reports namespace pids", "two pid namespaces, namespace pids",
		" beside a busy uncapped neighbour is capped", " beside a busy uncapped neighbour",
		" (far from the first guess) still converge to", ", held at",
		" still converge to", " held at",
		"escape/env: TESSERA_SM_LIMIT=100, TESSERA_QOS=best-effort in the env: the agent's 30% holds",
		"escape: 100% and best-effort in the env; the agent's 30% holds",
		" is limited too", "",
		"CUDA_VISIBLE_DEVICES=1: ordinal 0 is card 1 and gets card 1's limit", "CUDA_VISIBLE_DEVICES=1 gets card 1's limit",
	)
)

// shortCase is the suite's case name, shortened to fit a row label.
func shortCase(k smCase) string {
	s := holds.ReplaceAllString(k.name, "")
	s = shorter.Replace(s)
	s = parenthesis.ReplaceAllString(s, "")
	s = shorter.Replace(s)
	if !strings.Contains(s, "SMs") {
		s += fmt.Sprintf(", %d SMs", k.sms)
	}
	return s
}

func percentTicks() []plot.Tick {
	var ts []plot.Tick
	for v := 0; v <= 100; v += 10 {
		ts = append(ts, plot.Tick{Value: float64(v), Label: fmt.Sprint(v)})
	}
	return ts
}

type bandMark struct{}

func (bandMark) Thumbnail(c *draw.Canvas) {
	y := (c.Min.Y + c.Max.Y) / 2
	c.FillPolygon(paleBlue, rect(c.Min.X, y-5, c.Max.X, y+5))
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(draw.LineStyle{Color: blue, Width: 1.5}, x, y-5, x, y+5)
}

type dotMark struct{ clr color.Color }

func (d dotMark) Thumbnail(c *draw.Canvas) {
	clr := d.clr
	if clr == nil {
		clr = black
	}
	c.DrawGlyph(draw.GlyphStyle{Color: clr, Radius: 3, Shape: draw.CircleGlyph{}}, c.Center())
}

// failure says why the suite failed a case, as its checks do: too few undisturbed
// windows, a window too far off, or the mean off target.
func failure(k smCase) string {
	switch {
	case k.windows < 3:
		return "failed: the machine stalled"
	case k.worstWindow > smTolerance+2:
		return fmt.Sprintf("failed: a window off by %.1f", k.worstWindow)
	default:
		return "failed: off target"
	}
}

// notDrawn names the failed checks of the suite the picture does not show.
func notDrawn(names string) string {
	if names == "" {
		return ""
	}
	return " (failed and not drawn: " + names + "; its lines are in the data file)"
}
