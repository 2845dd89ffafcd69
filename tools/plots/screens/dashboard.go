package main

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"regexp"
	"strings"
)

// The dashboard's layout, drawn from its own panel definitions: every panel at its
// gridPos, with its title, type, unit and legend format; the series are sample data
// (sampleSeries), since there is no Prometheus here. Grafana's grid: 24 columns, rows
// of 30 px, 8 px between panels.

type dashboard struct {
	Title      string
	Refresh    string
	Time       struct{ From, To string }
	Templating struct {
		List []struct{ Name, Label string }
	}
	Panels []panel
}

type panel struct {
	Type, Title, Description string
	GridPos                  struct{ X, Y, W, H int }
	Targets                  []target
	FieldConfig              struct {
		Defaults struct{ Unit string }
	}
}

type target struct {
	Expr, LegendFormat, Format string
	RefID                      string `json:"refId"`
	Instant                    bool
}

const (
	pageW   = 1240
	pad     = 16
	gap     = 8
	rowPx   = 30
	headerH = 100
	points  = 73 // a sample every 5 minutes over the dashboard's 6 hours
)

// Grafana's classic palette.
var palette = []string{"#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0", "#508642", "#CCA300"}

func writeDashboard(file, source string, b []byte) (w, h int, err error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return 0, 0, err
	}
	if len(d.Panels) == 0 {
		return 0, 0, fmt.Errorf("no panels")
	}
	colW := float64(pageW-2*pad-23*gap) / 24
	bottom := 0
	var body strings.Builder
	for _, p := range d.Panels {
		g := p.GridPos
		x := pad + float64(g.X)*(colW+gap)
		y := headerH + g.Y*(rowPx+gap)
		pw := float64(g.W)*colW + float64(g.W-1)*gap
		ph := g.H*rowPx + (g.H-1)*gap
		bottom = max(bottom, y+ph)
		switch p.Type {
		case "row":
			fmt.Fprintf(&body, `<div class="row" style="left:%.0fpx;top:%dpx;width:%.0fpx">&#9662; %s</div>`, x, y, pw, html.EscapeString(p.Title))
		case "timeseries":
			fmt.Fprintf(&body, `<div class="panel" style="left:%.0fpx;top:%dpx;width:%.0fpx;height:%dpx"><div class="title">%s</div>%s</div>`,
				x, y, pw, ph, html.EscapeString(p.Title), timeseries(p, pw, ph-30))
		case "table":
			fmt.Fprintf(&body, `<div class="panel" style="left:%.0fpx;top:%dpx;width:%.0fpx;height:%dpx"><div class="title">%s</div>%s</div>`,
				x, y, pw, ph, html.EscapeString(p.Title), table(p))
		case "stat":
			fmt.Fprintf(&body, `<div class="panel" style="left:%.0fpx;top:%dpx;width:%.0fpx;height:%dpx"><div class="title">%s</div><div class="stat">0</div></div>`,
				x, y, pw, ph, html.EscapeString(p.Title))
		default:
			fmt.Fprintf(&body, `<div class="panel" style="left:%.0fpx;top:%dpx;width:%.0fpx;height:%dpx"><div class="title">%s</div><div class="note">%s panel</div></div>`,
				x, y, pw, ph, html.EscapeString(p.Title), html.EscapeString(p.Type))
		}
	}
	var vars []string
	for _, v := range d.Templating.List {
		value := "All"
		if v.Name == "datasource" {
			value = "Prometheus"
		}
		vars = append(vars, fmt.Sprintf(`<span class="var"><b>%s</b> %s &#9662;</span>`, html.EscapeString(v.Label), value))
	}
	h = bottom + pad
	page := fmt.Sprintf(`<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body { margin:0; background:#f4f5f5; font:13px/1.35 "Liberation Sans", Arial, Helvetica, sans-serif; color:#24292e; }
.top { position:absolute; left:%dpx; top:10px; right:%dpx; }
.top h1 { font-size:19px; font-weight:500; margin:0 0 6px; }
.top .time { position:absolute; right:0; top:0; border:1px solid #c7d0d9; background:#fff; border-radius:2px; padding:3px 10px; }
.var { display:inline-block; margin-right:10px; border:1px solid #c7d0d9; background:#fff; border-radius:2px; padding:3px 10px; }
.var b { font-weight:500; color:#3d71d9; margin-right:6px; }
.banner { position:absolute; left:%dpx; top:68px; right:%dpx; color:#6e6e6e; font-size:12px; }
.row { position:absolute; font-size:15px; font-weight:500; line-height:30px; }
.panel { position:absolute; background:#fff; border:1px solid #dce1e6; border-radius:3px; overflow:hidden; }
.title { height:30px; line-height:30px; padding:0 10px; font-weight:500; white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }
.stat { color:#56a64b; font-size:56px; font-weight:500; text-align:center; line-height:80px; }
table { border-collapse:collapse; width:100%%; font-size:12px; }
th { text-align:left; color:#3d71d9; font-weight:500; border-bottom:1px solid #dce1e6; padding:4px 8px; white-space:nowrap; }
td { padding:3px 8px; border-bottom:1px solid #eef0f2; white-space:nowrap; }
td.num { text-align:right; }
.note { color:#6e6e6e; padding:10px; }
</style></head><body>
<div class="top"><h1>%s</h1><span class="time">Last 6 hours &nbsp;&#8635; %s</span><div>%s</div></div>
<div class="banner">The layout of %s drawn from its panel definitions with sample data (make screens): not a screenshot of Grafana, not measured figures.</div>
%s
</body></html>`, pad, pad, pad, pad, html.EscapeString(d.Title), html.EscapeString(d.Refresh), strings.Join(vars, ""), html.EscapeString(source), body.String())
	return pageW, h, os.WriteFile(file, []byte(page), 0o644)
}

// series is one line of a time-series panel.
type series struct {
	name   string
	values []float64
}

var placeholder = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// Sample label values, as a small cluster would have them.
var sampleLabels = map[string][]string{
	"node":      {"gpu-a100-0", "gpu-a100-1", "gpu-t4-0"},
	"queue":     {"research", "inference"},
	"kind":      {"deserved", "allocated", "request"},
	"reason":    {"queue at its share", "gang does not fit", "insufficient memory"},
	"instance":  {"10.0.1.11:9400", "10.0.1.12:9400", "10.0.1.13:9400"},
	"namespace": {"team-a", "team-a", "team-b", "team-b", "serving"},
	"pod":       {"llm-finetune-0", "llm-finetune-1", "resnet-ddp-0", "notebook-3", "bert-serving-1"},
	"container": {"trainer", "trainer", "worker", "notebook", "server"},
	"uuid":      {"GPU-3f1c…", "GPU-3f1c…", "GPU-a972…", "GPU-5d0e…", "GPU-c41b…"},
}

// expand names the series of one target from its legend format and the sample labels.
func expand(format string) []map[string]string {
	names := placeholder.FindAllStringSubmatch(format, -1)
	if len(names) == 0 {
		return []map[string]string{{}}
	}
	// Container labels go together (one container per row); others multiply.
	sets := []map[string]string{{}}
	together := false
	for _, n := range names {
		if n[1] == "pod" {
			together = true
		}
	}
	if together {
		var out []map[string]string
		for i := range sampleLabels["pod"] {
			m := map[string]string{}
			for _, n := range names {
				m[n[1]] = sampleLabels[n[1]][i%len(sampleLabels[n[1]])]
			}
			out = append(out, m)
		}
		return out
	}
	for _, n := range names {
		var next []map[string]string
		for _, s := range sets {
			for _, v := range sampleLabels[n[1]] {
				m := map[string]string{n[1]: v}
				for k, vv := range s {
					m[k] = vv
				}
				next = append(next, m)
			}
		}
		sets = next
	}
	return sets
}

func legend(format string, labels map[string]string) string {
	return placeholder.ReplaceAllStringFunc(format, func(m string) string {
		return labels[placeholder.FindStringSubmatch(m)[1]]
	})
}

// sampleSeries makes a deterministic, plausible curve for one series: flat for a
// capacity, steps for what is promised or deserved, a noisy fraction for what is used.
func sampleSeries(p panel, legendText string, k int) []float64 {
	scale := 1.0
	switch p.FieldConfig.Defaults.Unit {
	case "bytes":
		scale = 40 * (1 << 30)
	case "s":
		scale = 1
	}
	node := float64(8)
	if strings.Contains(legendText, "t4") {
		node = 4
		if p.FieldConfig.Defaults.Unit == "bytes" {
			scale = 15 * (1 << 30)
		}
	}
	v := make([]float64, points)
	lower := strings.ToLower(legendText)
	for i := range v {
		t := float64(i) / float64(points-1)
		wave := 0.5 + 0.5*math.Sin(6.3*t*1.7+float64(k))
		noise := 0.08 * math.Sin(float64(i)*2.1+float64(k)*1.3)
		step := math.Floor((0.35+0.5*t+0.15*math.Sin(3*t+float64(k)))*8) / 8
		switch {
		case strings.HasSuffix(lower, "capacity"), strings.HasSuffix(lower, "cards"):
			v[i] = node * scale
		case strings.Contains(p.Title, "Agents up"):
			v[i] = 1
		case strings.Contains(p.Title, "Inventory age"):
			v[i] = 12 + 5*float64(k) + 6*math.Sin(float64(i)*0.9+float64(k)) + 3*noise
		case strings.Contains(p.Title, "Top containers"):
			v[i] = scale * (0.15 + 0.12*float64(k)) * (0.8 + 0.2*wave + noise)
		case strings.Contains(p.Title, "Time to cards"):
			v[i] = (1 + 3*float64(k)) * (0.8 + 0.6*wave)
		case strings.Contains(p.Title, "Pending"):
			v[i] = math.Max(0, math.Round(6*wave-2*float64(k)))
		case strings.Contains(lower, "deserved"):
			v[i] = (3 - float64(k%3)) * scale * 1.5
		case strings.Contains(lower, "promised"), strings.Contains(lower, "allocated"), strings.Contains(lower, "request"):
			v[i] = node * scale * math.Min(1, step+0.05*float64(k%3))
		case strings.Contains(lower, "used"):
			v[i] = node * scale * math.Max(0.05, math.Min(1, step*(0.55+noise)))
		default:
			v[i] = scale * (1 + float64(k%4)) * (0.6 + 0.4*wave + noise)
		}
	}
	return v
}

// timeseries draws a panel's sample series as an SVG chart with its legend table on
// the right, as the dashboard's options ask.
func timeseries(p panel, w float64, h int) string {
	var ss []series
	for _, t := range p.Targets {
		for _, labels := range expand(t.LegendFormat) {
			name := legend(t.LegendFormat, labels)
			ss = append(ss, series{name: name, values: sampleSeries(p, name, len(ss))})
		}
	}
	legendW := math.Min(w*0.42, 290)
	cw := w - legendW - 10
	top, bottomPad, left := 6.0, 22.0, 62.0
	ymax := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			ymax = math.Max(ymax, v)
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	unit := 1.0
	if p.FieldConfig.Defaults.Unit == "bytes" {
		unit = 1 << 30
	}
	ymax = niceCeil(ymax*1.1/unit) * unit
	ph := float64(h) - top - bottomPad
	pw := cw - left - 18
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%.0f" height="%d" style="position:absolute;left:0;top:30px" font-size="11" fill="#6e6e6e" font-family="Liberation Sans, Arial, sans-serif">`, cw, h)
	for i := 0; i <= 4; i++ {
		y := top + ph - ph*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eef0f2"/>`, left, left+pw, y, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-5, y+4, formatUnit(ymax*float64(i)/4, p.FieldConfig.Defaults.Unit))
	}
	every := 1
	if pw < 300 {
		every = 2
	}
	for i := 0; i <= 6; i += every {
		x := left + pw*float64(i)/6
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%02d:00</text>`, x, top+ph+16, 6+i)
	}
	for k, s := range ss {
		var pts []string
		for i, v := range s.values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", left+pw*float64(i)/float64(points-1), top+ph-ph*v/ymax))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, palette[k%len(palette)], strings.Join(pts, " "))
	}
	b.WriteString(`</svg>`)
	fmt.Fprintf(&b, `<div style="position:absolute;left:%.0fpx;top:34px;width:%.0fpx;height:%dpx;overflow:hidden;font-size:12px">`, cw+4, legendW, h-4)
	b.WriteString(`<div style="color:#3d71d9;border-bottom:1px solid #dce1e6;padding-bottom:2px;margin-bottom:2px">Name</div>`)
	for k, s := range ss {
		fmt.Fprintf(&b, `<div style="white-space:nowrap;overflow:hidden;text-overflow:ellipsis;line-height:18px"><span style="display:inline-block;width:14px;height:4px;background:%s;vertical-align:middle;margin-right:6px;border-radius:2px"></span>%s</div>`,
			palette[k%len(palette)], html.EscapeString(s.name))
	}
	b.WriteString(`</div>`)
	return b.String()
}

var byLabels = regexp.MustCompile(`by \(([^)]*)\)`)

// table draws an instant table: one column per label the queries keep, one per target
// (its legend format names the column, as the merge transformation does).
func table(p panel) string {
	labels := []string{}
	seen := map[string]bool{}
	for _, t := range p.Targets {
		for _, m := range byLabels.FindAllStringSubmatch(t.Expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !seen[l] {
					seen[l] = true
					labels = append(labels, l)
				}
			}
		}
	}
	container := false
	for _, t := range p.Targets {
		container = container || strings.Contains(t.Expr, "tessera_container_")
	}
	if len(labels) == 0 {
		if container {
			labels = []string{"namespace", "pod", "container", "node", "uuid"}
		} else {
			labels = []string{"node", "index", "uuid"}
		}
	}
	var b strings.Builder
	b.WriteString(`<table><tr>`)
	for _, l := range labels {
		fmt.Fprintf(&b, `<th>%s</th>`, html.EscapeString(l))
	}
	for _, t := range p.Targets {
		fmt.Fprintf(&b, `<th>%s</th>`, html.EscapeString(t.LegendFormat))
	}
	b.WriteString(`</tr>`)
	rows := 7
	for r := 0; r < rows; r++ {
		b.WriteString(`<tr>`)
		for _, l := range labels {
			fmt.Fprintf(&b, `<td>%s</td>`, html.EscapeString(sampleCell(l, r)))
		}
		for k, t := range p.Targets {
			v := 0.15 + 0.8*math.Abs(math.Sin(float64(r*3+k)*1.7))
			if strings.Contains(t.LegendFormat, "healthy") {
				v = 1
			}
			fmt.Fprintf(&b, `<td class="num">%.3g</td>`, v)
		}
		b.WriteString(`</tr>`)
	}
	b.WriteString(`</table>`)
	return b.String()
}

func sampleCell(label string, r int) string {
	switch label {
	case "index":
		return fmt.Sprint(r % 4)
	case "node":
		return sampleLabels["node"][r/4%len(sampleLabels["node"])]
	}
	if vs := sampleLabels[label]; len(vs) > 0 {
		return vs[r%len(vs)]
	}
	return "…"
}

func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func formatUnit(v float64, unit string) string {
	switch unit {
	case "bytes":
		units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
		i := 0
		for v >= 1024 && i < len(units)-1 {
			v /= 1024
			i++
		}
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v), "0"), ".") + " " + units[i]
	case "s":
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v), "0"), ".") + " s"
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", v), "0"), ".0")
}
