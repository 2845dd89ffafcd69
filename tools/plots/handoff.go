package main

import (
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The handoff as a sequence diagram (docs/images/handoff.svg): how a container gets
// exactly the cards and limits the scheduler chose, though the kubelet's Allocate never
// names the pod. Edit the participants and steps below; make plots redraws it.

type seqParticipant struct {
	id, title, sub string
	tessera        bool
}

// seqStep is a message from one participant to another (a reply when dashed), or, with
// from == to, a note on that participant's lifeline.
type seqStep struct {
	from, to string
	text     string // lines split at \n
	reply    bool
}

var handoffParticipants = []seqParticipant{
	{id: "sched", title: "vc-scheduler", sub: "vgpu plugin", tessera: true},
	{id: "api", title: "API server", sub: "Pod object"},
	{id: "agent", title: "Node agent", sub: "vgpu-device-plugin", tessera: true},
	{id: "kubelet", title: "kubelet", sub: "device manager"},
	{id: "ctr", title: "Container", sub: "app + vgpu-core", tessera: true},
}

var handoffSteps = []seqStep{
	{from: "sched", to: "api", text: "Binding: spec.nodeName and\ntessera.io/assignment (signed),\nhandoff: pending"},
	{from: "api", to: "agent", text: "watch: a pod assigned\nto this node"},
	{from: "kubelet", to: "agent", text: "GetPreferredAllocation\n(the free slots, UUID::k)"},
	{from: "agent", to: "kubelet", reply: true, text: "one slot on each card of the\nnext pending assignment"},
	{from: "kubelet", to: "agent", text: "Allocate(slot IDs)"},
	{from: "agent", to: "agent", text: "cards = the cards the slot IDs name;\nthe one pending container assigned exactly\nthose cards, or refuse; write its directory\n(limits.env, region) and a record on disk"},
	{from: "agent", to: "kubelet", reply: true, text: "its cards (an environment\nvariable or CDI devices) and\nthe directory, read-only"},
	{from: "kubelet", to: "kubelet", text: "records which pod and\ncontainer hold the slot IDs"},
	{from: "kubelet", to: "agent", text: "PreStartContainer(slot IDs)"},
	{from: "agent", to: "kubelet", text: "PodResources List:\nwho holds these IDs?"},
	{from: "kubelet", to: "agent", reply: true, text: "pod UID, container name"},
	{from: "agent", to: "agent", text: "record and assignment agree with the\nkubelet's own table? else refuse (the pod's\nhandoff: failed, with the reason);\nrewrite limits.env from the assignment"},
	{from: "agent", to: "api", text: "PATCH handoff: done\n(pod UID as precondition)"},
	{from: "kubelet", to: "ctr", text: "start the container"},
	{from: "ctr", to: "ctr", text: "vgpu-core reads limits.env (read-only):\nmemory and SM limits per card,\ncounted in the shared region"},
}

const (
	seqW       = 900
	seqSpacing = 178
	seqLeft    = 94 // centre of the first lifeline
	seqHeadH   = 46
	seqFont    = 10.5
)

func handoffSVG() []byte {
	x := map[string]float64{}
	for i, p := range handoffParticipants {
		x[p.id] = seqLeft + float64(i)*seqSpacing
	}
	lead := seqFont * 1.3
	// Heights: a message takes its label's lines and the arrow; a note its box.
	height := func(s seqStep) float64 {
		n := float64(len(lines(s.text)))
		if s.from == s.to {
			return n*lead + 24
		}
		return n*lead + 18
	}
	top := 20 + seqHeadH + 20.0
	total := top
	for _, s := range handoffSteps {
		total += height(s)
	}
	total += 20
	return render(seqW, vg.Length(total+10), []string{
		"Allocate carries slot IDs only, never the pod: the agent takes the cards from the IDs and the container from the kubelet's own table, and refuses",
		"rather than guess. Each step and every refusal: docs/device-plugin.md, section 1. Checked by deviceplugin/handoff's tests (a fake kubelet over",
		"real gRPC, e.g. TestFiftyPodsBoundInQuickSuccessionEachGetTheirOwnCards) and by make e2e on real kubelets.",
	}, func(c draw.Canvas) {
		b := board{c}
		for _, p := range handoffParticipants {
			fill, stroke, title := other.colours()
			if p.tessera {
				fill, stroke, title = part.colours()
			}
			cx := x[p.id]
			b.line(draw.LineStyle{Color: grey, Width: 1, Dashes: []vg.Length{3, 3}}, cx, 20+seqHeadH, cx, total)
			b.rect(cx-80, 20, 160, seqHeadH, 6, fill, stroke, false)
			b.text(cx, 26, sansBold, 12.5, title, draw.XCenter, p.title)
			b.text(cx, 44, sans, 10, black, draw.XCenter, p.sub)
		}
		y := top
		for _, s := range handoffSteps {
			ls := lines(s.text)
			h := height(s)
			if s.from == s.to {
				w := textWidth(sans, seqFont, ls...) + 18
				// A note is centred on its lifeline, kept inside the picture.
				cx := min(max(x[s.from], w/2+6), seqW-w/2-6)
				b.rect(cx-w/2, y+4, w, h-10, 4, paleOrng, orange, false)
				b.text(cx, y+11, sans, seqFont, black, draw.XCenter, ls...)
				y += h
				continue
			}
			x0, x1 := x[s.from], x[s.to]
			mid := (x0 + x1) / 2
			b.text(mid, y+2, sans, seqFont, black, draw.XCenter, ls...)
			ay := y + float64(len(ls))*lead + 8
			b.arrow(black, 1.2, s.reply, false, [2]float64{x0, ay}, [2]float64{x1, ay})
			y += h
		}
	})
}
