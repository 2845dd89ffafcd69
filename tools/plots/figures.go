package main

import "path/filepath"

// figure is one SVG of docs/images: its file name, the data files it reads (relative
// to the data directory; none for a diagram) and how it is drawn.
type figure struct {
	name    string
	sources []string
	draw    func(data string) ([]byte, error)
}

// scaleRuns are the make scale runs drawn, each a directory of docs/data holding one
// result per scheduler (make scale SCALE_DATA=docs/data/<run>).
var scaleRuns = []string{"scale-100", "scale-250"}

var scaleModes = []string{"floor", "deviceshare", "tessera"}

// figures lists every picture tools/plots draws.
func figures() []figure {
	fs := []figure{
		{name: "architecture.svg", draw: func(string) ([]byte, error) { return architectureSVG(), nil }},
		{name: "handoff.svg", draw: func(string) ([]byte, error) { return handoffSVG(), nil }},
		{name: "queue-shares.svg", draw: func(string) ([]byte, error) { return queueSharesSVG() }},
		{name: "session-growth.svg", sources: []string{sessionBench}, draw: sessionGrowthSVG},
		{name: "isolation.svg", sources: []string{isolationData}, draw: isolationSVG},
	}
	var all []string
	for _, run := range scaleRuns {
		var src []string
		for _, m := range scaleModes {
			src = append(src, filepath.Join(run, m+".json"))
		}
		all = append(all, src...)
		fs = append(fs, figure{name: run + "-pods-bound.svg", sources: src,
			draw: func(data string) ([]byte, error) { return podsBoundSVG(data, run) }})
		fs = append(fs, figure{name: run + "-scheduler.svg", sources: src,
			draw: func(data string) ([]byte, error) { return schedulerSVG(data, run) }})
	}
	fs = append(fs, figure{name: "scale-cards.svg", sources: all, draw: cardsSVG})
	return fs
}
