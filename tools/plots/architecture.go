package main

import (
	"image/color"
	"strings"

	"gonum.org/v1/plot/vg/draw"
)

// The architecture picture (docs/images/architecture.svg): Tessera's parts, and what
// each writes and reads. Edit the boxes and arrows below; make plots redraws it.
// Coordinates are points from the top-left corner.

// archKind says how a box is drawn.
type archKind int

const (
	part   archKind = iota // a Tessera process (blue)
	other                  // Kubernetes' or Volcano's, or the user's (grey)
	object                 // an API object and its annotations (white, inside the API server)
	group                  // a dashed frame around boxes (a GPU node)
)

type archBox struct {
	kind       archKind
	x, y, w, h float64
	title      string
	body       string // lines split at \n
	mono       bool   // the body is annotation keys; lines indented by two spaces say what they hold
	left       bool   // the title at the top left, not centred
}

type archArrow struct {
	pts    [][2]float64
	label  string  // lines split at \n
	lx, ly float64 // where the label's centre goes
	left   bool    // the label starts at lx instead of being centred
	right  bool    // the label ends at lx
	both   bool    // a head at each end (a conversation)
}

const archW, archH = 900, 640

var archBoxes = []archBox{
	{kind: other, x: 335, y: 10, w: 220, h: 44, title: "Users and CI", body: "VolcanoJobs and pods"},
	{kind: part, x: 15, y: 40, w: 210, h: 95, title: "Admission webhook",
		body: "on by default: routes pods\nto Volcano and a queue;\nrefuses bad requests"},
	{kind: part, x: 15, y: 175, w: 210, h: 150, title: "vc-scheduler",
		body: "Volcano + the vgpu plugin:\npicks the node and the\ncards; divides cards among\nqueues by weight; reclaim\nand preempt for cards"},
	{kind: part, x: 15, y: 440, w: 210, h: 95, title: "kubectl tessera",
		body: "nodes, pod, explain,\nreport (the card map)"},

	{kind: other, x: 335, y: 80, w: 220, h: 450, title: "Kubernetes API server"},
	{kind: object, x: 347, y: 112, w: 196, h: 82, title: "Node", mono: true,
		body: "tessera.io/inventory\n  cards, health, links\ntessera.io/heartbeat"},
	{kind: object, x: 347, y: 210, w: 196, h: 136, title: "Pod", mono: true,
		body: "volcano.sh/vgpu-*\n  the user's limits\ntessera.io/assignment\n  cards per container, signed\ntessera.io/handoff\n  pending, done, failed"},
	{kind: object, x: 347, y: 362, w: 196, h: 62, title: "Queue, PodGroup, VolcanoJob", body: "Volcano's: weights, gangs"},
	{kind: object, x: 347, y: 440, w: 196, h: 62, title: "ConfigMap", mono: true,
		body: "volcano-scheduler.conf\n  the plugin's arguments"},

	{kind: group, x: 665, y: 60, w: 225, h: 570, title: "GPU node"},
	{kind: part, x: 680, y: 92, w: 195, h: 225, title: "Node agent",
		body: "vgpu-device-plugin:\nfinds the cards (NVML),\npublishes them; hands\neach container exactly\nits cards and limits,\nor refuses; checks the\nscheduler's signature;\nstops pods over their\nmemory (NVML); metrics"},
	{kind: other, x: 680, y: 380, w: 120, h: 46, title: "kubelet", body: "device manager"},
	{kind: other, x: 680, y: 490, w: 195, h: 130, title: "Container", left: true},
	{kind: part, x: 690, y: 520, w: 130, h: 44, title: "app + vgpu-core", body: "(LD_PRELOAD)"},
	{kind: object, x: 690, y: 576, w: 175, h: 38, title: "/var/run/tessera", body: "limits.env (ro), region (rw)"},
}

var archArrows = []archArrow{
	{pts: [][2]float64{{445, 54}, {445, 80}}},
	{pts: [][2]float64{{335, 100}, {225, 100}}, label: "pod create", lx: 280, ly: 86},
	{pts: [][2]float64{{335, 210}, {225, 210}}, label: "watches Nodes,\nPods, Queues", lx: 280, ly: 187},
	{pts: [][2]float64{{225, 290}, {347, 290}}, label: "binds with\nthe assignment", lx: 280, ly: 267},
	{pts: [][2]float64{{335, 487}, {225, 487}}, label: "reads Nodes,\nPods, the conf", lx: 280, ly: 464},
	{pts: [][2]float64{{680, 150}, {543, 150}}, label: "writes\ninventory", lx: 610, ly: 130},
	{pts: [][2]float64{{543, 245}, {680, 245}}, label: "watches its\nnode's pods", lx: 610, ly: 224},
	{pts: [][2]float64{{680, 300}, {543, 300}}, label: "writes\nhandoff", lx: 610, ly: 280},
	{pts: [][2]float64{{715, 317}, {715, 380}}, both: true, left: true, lx: 724, ly: 349,
		label: "device plugin\nAPI (gRPC),\nPodResources"},
	{pts: [][2]float64{{715, 426}, {715, 490}}, left: true, lx: 724, ly: 458, label: "starts it with\nits cards"},
	{pts: [][2]float64{{860, 317}, {860, 576}}, right: true, lx: 856, ly: 540, label: "writes\nlimits"},
	{pts: [][2]float64{{750, 576}, {750, 564}}},
}

func (k archKind) colours() (fill, stroke, title color.Color) {
	switch k {
	case part:
		return paleBlue, blue, blue
	case object:
		return white, grey, black
	case group:
		return nil, grey, grey
	default:
		return paleGrey, grey, black
	}
}

// architectureSVG draws the boxes, then the arrows over them, then a legend.
func architectureSVG() []byte {
	return render(archW, archH, []string{
		"Blue: Tessera's parts. Grey: Kubernetes', Volcano's, the user's. Arrows: writes and reads through the API server, and on the node",
		"the kubelet's device plugin API and the files the agent mounts. docs/contract.md has every annotation, docs/device-plugin.md the handoff.",
	}, func(c draw.Canvas) {
		b := board{c}
		for _, x := range archBoxes {
			fill, stroke, titleColour := x.kind.colours()
			b.rect(x.x, x.y, x.w, x.h, 6, fill, stroke, x.kind == group)
			if x.kind == group {
				b.text(x.x+10, x.y+8, sansBold, 11, titleColour, draw.XLeft, x.title)
				continue
			}
			body := lines(x.body)
			if x.kind == object {
				b.text(x.x+8, x.y+6, sansBold, 10.5, titleColour, draw.XLeft, x.title)
				y := x.y + 23
				for _, l := range body {
					switch {
					case strings.HasPrefix(l, "  "):
						y += b.text(x.x+16, y, sans, 9.5, grey, draw.XLeft, strings.TrimSpace(l))
					case x.mono:
						y += b.text(x.x+8, y, mono, 9.5, black, draw.XLeft, l)
					default:
						y += b.text(x.x+8, y, sans, 10, black, draw.XLeft, l)
					}
				}
				continue
			}
			if x.left {
				b.text(x.x+10, x.y+8, sansBold, 12.5, titleColour, draw.XLeft, x.title)
				continue
			}
			b.text(x.x+x.w/2, x.y+8, sansBold, 12.5, titleColour, draw.XCenter, x.title)
			b.text(x.x+x.w/2, x.y+28, sans, 10.5, black, draw.XCenter, body...)
		}
		for _, a := range archArrows {
			b.arrow(black, 1.2, false, a.both, a.pts...)
		}
		for _, a := range archArrows {
			if a.label == "" {
				continue
			}
			ls := lines(a.label)
			if a.left || a.right {
				h := float64(len(ls)) * 10 * 1.3
				b.text(a.lx, a.ly-h/2, sans, 10, black, map[bool]draw.XAlignment{true: draw.XLeft, false: draw.XRight}[a.left], ls...)
				continue
			}
			b.label(a.lx, a.ly, 10, ls...)
		}
	})
}
