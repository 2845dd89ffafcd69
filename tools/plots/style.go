package main

import (
	"bytes"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Liberation Sans has Arial's metrics, so text placed with it sits where it should in
// any browser that has Arial, Helvetica or Liberation Sans (the SVG names them in turn).
var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: 3} // golang.org/x/image/font.WeightBold
	mono     = font.Font{Typeface: "Liberation", Variant: "Mono"}
)

func init() {
	plot.DefaultFont = sans
	plotter.DefaultFont = sans
}

// Colours: the Okabe-Ito palette, told apart with any colour vision.
var (
	black     = color.RGBA{0x22, 0x22, 0x22, 0xff}
	grey      = color.RGBA{0x80, 0x80, 0x80, 0xff}
	paleGrey  = color.RGBA{0xf5, 0xf5, 0xf5, 0xff}
	blue      = color.RGBA{0x00, 0x72, 0xb2, 0xff}
	paleBlue  = color.RGBA{0xd6, 0xe9, 0xf5, 0xff}
	orange    = color.RGBA{0xe6, 0x9f, 0x00, 0xff}
	paleOrng  = color.RGBA{0xfb, 0xec, 0xcc, 0xff}
	green     = color.RGBA{0x00, 0x9e, 0x73, 0xff}
	paleGreen = color.RGBA{0xd4, 0xf0, 0xe6, 0xff}
	vermilion = color.RGBA{0xd5, 0x5e, 0x00, 0xff}
	purple    = color.RGBA{0xcc, 0x79, 0xa7, 0xff}
	palePurp  = color.RGBA{0xf5, 0xe4, 0xee, 0xff}
	white     = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// schedulerColour is each scheduler's colour in every plot.
var schedulerColour = map[string]color.Color{"floor": grey, "deviceshare": orange, "tessera": blue}

// schedulerLabel names the schedulers as the docs do.
var schedulerLabel = map[string]string{
	"floor":       "floor (Volcano, no device plugin)",
	"deviceshare": "Volcano deviceshare",
	"tessera":     "Tessera",
}

// textStyle is a text style of the given font and size, aligned by xa, ya.
func textStyle(f font.Font, size vg.Length, clr color.Color, xa draw.XAlignment, ya draw.YAlignment) draw.TextStyle {
	return draw.TextStyle{Color: clr, Font: font.From(f, size), XAlign: xa, YAlign: ya, Handler: plot.DefaultTextHandler}
}

// styled sets a plot's fonts and sizes as every plot here has them.
func styled(p *plot.Plot, title, xLabel, yLabel string) {
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sansBold, 12)
	p.Title.Padding = 6
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 10)
		a.Tick.Label.Font = font.From(sans, 9)
		a.Color, a.Tick.Color = grey, grey
		a.Tick.Label.Color = black
		a.Label.TextStyle.Color = black
	}
	p.Legend.TextStyle.Font = font.From(sans, 9)
	p.BackgroundColor = white
}

// render draws a figure w points wide: paint gets an area h points high, and the
// footnote (the data's source, a few lines) goes under it. The SVG's fonts fall back to
// metric-compatible ones.
func render(w, h vg.Length, footnote []string, paint func(c draw.Canvas)) []byte {
	foot := vg.Length(0)
	if len(footnote) > 0 {
		foot = vg.Length(len(footnote))*12 + 10
	}
	h += foot
	cv := vgsvg.New(w, h)
	dc := draw.New(cv)
	dc.FillPolygon(white, []vg.Point{{X: 0, Y: 0}, {X: w, Y: 0}, {X: w, Y: h}, {X: 0, Y: h}})
	if len(footnote) > 0 {
		sty := textStyle(sans, 9, grey, draw.XLeft, draw.YBottom)
		for i, line := range footnote {
			dc.FillText(sty, vg.Point{X: 10, Y: 6 + vg.Length(len(footnote)-1-i)*12}, line)
		}
	}
	paint(draw.Crop(dc, 0, 0, foot, 0))
	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		panic(err) // a bytes.Buffer does not fail
	}
	return fallbackFonts(buf.Bytes())
}

// fallbackFonts names, after each Liberation face, the faces with its metrics and a
// generic family, so a viewer without Liberation draws the text the same size.
func fallbackFonts(svg []byte) []byte {
	r := strings.NewReplacer(
		"font-family:Liberation Sans;", "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;",
		"font-family:Liberation Mono;", "font-family:'Liberation Mono','Courier New',monospace;",
		"font-family:Liberation Serif;", "font-family:'Liberation Serif','Times New Roman',serif;",
	)
	return []byte(r.Replace(string(svg)))
}

// plotSVG renders a plot over a footnote, with a margin above its title.
func plotSVG(p *plot.Plot, w, h vg.Length, footnote ...string) []byte {
	return render(w, h, footnote, func(c draw.Canvas) { p.Draw(draw.Crop(c, 4, -8, 0, -6)) })
}
