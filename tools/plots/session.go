package main

import (
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// sessionBench is make bench-data's file: BenchmarkSession and BenchmarkSessionGrowth
// (plugins/vgpu) in Go's benchmark format.
const sessionBench = "session-bench.txt"

var (
	growthNodes = []int{250, 500, 1000}
	growthTasks = []int{250, 500, 1000}
)

// sessionGrowthSVG: CPU seconds of one allocate session against the cluster's nodes,
// one line per count of pending tasks, with and without Tessera's plugin.
func sessionGrowthSVG(data string) ([]byte, error) {
	bf, err := loadBench(data, sessionBench)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(data, sessionBench)
	p := plot.New()
	styled(p, "CPU time of one allocate session, by cluster size and pending tasks",
		"nodes (8 cards each)", "CPU seconds per session")
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = 6, -4
	colours := map[int]color.Color{250: green, 500: orange, 1000: blue}
	var errs []error
	var labels plotter.XYLabels
	for i := len(growthTasks) - 1; i >= 0; i-- {
		tasks := growthTasks[i]
		series := map[string]plotter.XYs{}
		for _, mode := range []string{"tessera", "none"} {
			for _, nodes := range growthNodes {
				name := fmt.Sprintf("BenchmarkSessionGrowth/nodes=%d/tasks=%d/%s", nodes, tasks, mode)
				v, err := bf.get(file, name, "cpu-s/op")
				if err != nil {
					errs = append(errs, err)
					continue
				}
				series[mode] = append(series[mode], plotter.XY{X: float64(nodes), Y: v})
			}
		}
		if len(series["tessera"]) != len(growthNodes) || len(series["none"]) != len(growthNodes) {
			continue
		}
		for _, mode := range []string{"tessera", "none"} {
			l, pts, err := plotter.NewLinePoints(series[mode])
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = colours[tasks], 2
			pts.Color, pts.Radius = colours[tasks], 2.5
			pts.Shape = draw.CircleGlyph{}
			label := fmt.Sprintf("%s pending tasks, Tessera", thousands(tasks))
			if mode == "none" {
				l.Dashes, l.Width = []vg.Length{5, 3}, 1.25
				pts.Shape = draw.RingGlyph{}
				label = fmt.Sprintf("%s pending tasks, no device plugin", thousands(tasks))
			}
			p.Add(l, pts)
			p.Legend.Add(label, l, pts)
		}
		for k, t := range series["tessera"] {
			labels.XYs = append(labels.XYs, t)
			labels.Labels = append(labels.Labels, fmt.Sprintf("%+.0f%%", 100*(t.Y/series["none"][k].Y-1)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i] = textStyle(sans, 8, black, draw.XLeft, draw.YCenter)
	}
	l.Offset = vg.Point{X: 5, Y: 6}
	p.Add(l)
	p.X.Min, p.X.Max, p.Y.Min = 150, 1100, 0
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 250, Label: "250"}, {Value: 500, Label: "500"}, {Value: 1000, Label: "1,000"}})
	p.Legend.Padding = 1.5
	return plotSVG(p, 620, 400,
		fmt.Sprintf("docs/data/%s: BenchmarkSessionGrowth (plugins/vgpu), make bench-data, %s, %s, load average %s at the start.",
			sessionBench, day(bf.config["date"]), bf.config["machine"], firstField(bf.config["load"])),
		"One session per point: Volcano v1.14.1's allocate action and plugins on an in-memory cache of 8-card nodes, gangs of four.",
		"Labels: Tessera's CPU time over the session's without a device plugin. CPU time, not wall time: steadier on a shared machine."), nil
}

// firstField is the first word of s (the 1-minute figure of a load-average line).
func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return s
}
