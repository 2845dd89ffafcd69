package main

import (
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// board draws a diagram in points from its top-left corner, y growing downwards, as
// one writes a layout; the canvas underneath counts y from the bottom.
type board struct {
	c draw.Canvas
}

func (b board) pt(x, y float64) vg.Point {
	return vg.Point{X: b.c.Min.X + vg.Length(x), Y: b.c.Max.Y - vg.Length(y)}
}

// rect is a box with rounded corners (radius r), filled and outlined (no outline when
// stroke is nil; dashed when dashed).
func (b board) rect(x, y, w, h, r float64, fill, stroke color.Color, dashed bool) {
	var p vg.Path
	p.Move(b.pt(x+r, y))
	p.Line(b.pt(x+w-r, y))
	p.QuadTo(b.pt(x+w, y), b.pt(x+w, y+r))
	p.Line(b.pt(x+w, y+h-r))
	p.QuadTo(b.pt(x+w, y+h), b.pt(x+w-r, y+h))
	p.Line(b.pt(x+r, y+h))
	p.QuadTo(b.pt(x, y+h), b.pt(x, y+h-r))
	p.Line(b.pt(x, y+r))
	p.QuadTo(b.pt(x, y), b.pt(x+r, y))
	p.Close()
	if fill != nil {
		b.c.SetColor(fill)
		b.c.Fill(p)
	}
	if stroke != nil {
		sty := draw.LineStyle{Color: stroke, Width: 1}
		if dashed {
			sty.Dashes = []vg.Length{4, 3}
		}
		b.c.SetLineStyle(sty)
		b.c.Stroke(p)
	}
}

// line strokes a straight line from (x0, y0) to (x1, y1).
func (b board) line(sty draw.LineStyle, x0, y0, x1, y1 float64) {
	b.c.StrokeLines(sty, []vg.Point{b.pt(x0, y0), b.pt(x1, y1)})
}

// text writes lines from (x, y), the top of the first line, aligned by xa (x is the
// left edge, the centre or the right edge). It returns the height used.
func (b board) text(x, y float64, f font.Font, size float64, clr color.Color, xa draw.XAlignment, lines ...string) float64 {
	sty := textStyle(f, vg.Length(size), clr, xa, draw.YTop)
	lead := size * 1.3
	for i, l := range lines {
		b.c.FillText(sty, b.pt(x, y+float64(i)*lead), l)
	}
	return float64(len(lines)) * lead
}

// textWidth is the widest of the lines at the given font and size.
func textWidth(f font.Font, size float64, lines ...string) float64 {
	sty := textStyle(f, vg.Length(size), black, draw.XLeft, draw.YTop)
	w := 0.0
	for _, l := range lines {
		w = math.Max(w, float64(sty.Width(l)))
	}
	return w
}

// label writes lines centred on (x, y) on a white ground, so a line under it stays
// readable.
func (b board) label(x, y float64, size float64, lines ...string) {
	w := textWidth(sans, size, lines...) + 6
	h := float64(len(lines))*size*1.3 + 2
	b.rect(x-w/2, y-h/2, w, h, 2, white, nil, false)
	b.text(x, y-h/2+1, sans, size, black, draw.XCenter, lines...)
}

// arrow draws a polyline through pts with a head at its end (and at its start too when
// both), solid or dashed.
func (b board) arrow(clr color.Color, width float64, dashed, both bool, pts ...[2]float64) {
	line := make([]vg.Point, len(pts))
	for i, p := range pts {
		line[i] = b.pt(p[0], p[1])
	}
	sty := draw.LineStyle{Color: clr, Width: vg.Length(width)}
	if dashed {
		sty.Dashes = []vg.Length{5, 3}
	}
	// Stop the line where the head begins, so a thick line does not poke through it.
	n := len(line)
	end := shorten(line[n-2], line[n-1], 5)
	drawn := append(append([]vg.Point{}, line[:n-1]...), end)
	if both {
		drawn[0] = shorten(line[1], line[0], 5)
	}
	b.c.StrokeLines(sty, drawn)
	b.head(clr, line[n-2], line[n-1])
	if both {
		b.head(clr, line[1], line[0])
	}
}

// head is an arrowhead at to, pointing from from.
func (b board) head(clr color.Color, from, to vg.Point) {
	dx, dy := float64(to.X-from.X), float64(to.Y-from.Y)
	l := math.Hypot(dx, dy)
	if l == 0 {
		return
	}
	ux, uy := dx/l, dy/l
	const size, half = 9.0, 4.0
	base := vg.Point{X: to.X - vg.Length(ux*size), Y: to.Y - vg.Length(uy*size)}
	b.c.FillPolygon(clr, []vg.Point{to,
		{X: base.X - vg.Length(uy*half), Y: base.Y + vg.Length(ux*half)},
		{X: base.X + vg.Length(uy*half), Y: base.Y - vg.Length(ux*half)}})
}

// shorten moves to towards from by d points.
func shorten(from, to vg.Point, d float64) vg.Point {
	dx, dy := float64(to.X-from.X), float64(to.Y-from.Y)
	l := math.Hypot(dx, dy)
	if l <= d {
		return to
	}
	return vg.Point{X: to.X - vg.Length(dx/l*d), Y: to.Y - vg.Length(dy/l*d)}
}

// lines splits a description's text at "\n".
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
