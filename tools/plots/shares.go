package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// The queue shares as a picture (docs/images/queue-shares.svg): an example cluster and
// three queues, their shares computed by placement/fairshare.Divide, the function the
// vgpu plugin calls every session, so the picture shows what the code does.

type shareQueue struct {
	name   string
	weight float64
	asks   float64 // card cores (100 per card)
	colour color.Color
	pale   color.Color
}

const shareCards = 24

var shareQueues = []shareQueue{
	{name: "research", weight: 3, asks: 2000, colour: blue, pale: paleBlue},
	{name: "inference", weight: 2, asks: 400, colour: green, pale: paleGreen},
	{name: "batch", weight: 1, asks: 1500, colour: purple, pale: palePurp},
}

func queueSharesSVG() ([]byte, error) {
	total := fairshare.Amount{Cores: shareCards * 100, MemoryMiB: shareCards * 40960}
	claims := make([]fairshare.Claim, len(shareQueues))
	weights := 0.0
	for i, q := range shareQueues {
		claims[i] = fairshare.Claim{Weight: q.weight, Request: fairshare.Amount{Cores: q.asks}, Capability: fairshare.Unlimited}
		weights += q.weight
	}
	deserved := fairshare.Divide(total, claims)
	sum := 0.0
	for _, d := range deserved {
		sum += d.Cores
	}
	if math.Abs(sum-total.Cores) > 1e-6 {
		return nil, fmt.Errorf("the example's queues ask for less than the cluster (%v of %v): it no longer shows a contended division", sum, total.Cores)
	}
	const (
		left  = 170.0 // where the bars start
		scale = 0.2   // points per card core: 2,400 → 480 pt
		rowH  = 58.0
	)
	x := func(cores float64) float64 { return left + cores*scale }
	height := 100 + float64(len(shareQueues))*rowH + 45
	return render(760, vg.Length(height), []string{
		"Computed by placement/fairshare.Divide (weighted max-min; TestDivide), which the vgpu plugin runs every session for card cores and card",
		"memory alike; enqueue, allocate, reclaim and preempt hold each queue to it (docs/queues.md; TestQueuesShareCardsByWeight in plugins/vgpu,",
		"TestQueuesShareCoresByWeightUnderContention in make e2e).",
	}, func(c draw.Canvas) {
		b := board{c}
		b.text(20, 14, sansBold, 12, black, draw.XLeft,
			fmt.Sprintf("%d cards (%s card cores) shared by three queues that together ask for more", shareCards, thousands(int(total.Cores))))
		b.text(20, 30, sans, 9, grey, draw.XLeft, "Per queue: the pale bar is what it asks, the solid bar what it deserves; the dashed line is its weight's part of the cluster.")
		// The cluster, cut into the deserved shares.
		b.text(20, 52, sansBold, 10, black, draw.XLeft, "the cluster")
		at := 0.0
		for i, q := range shareQueues {
			d := deserved[i].Cores
			b.rect(x(at), 44, d*scale, 30, 0, q.colour, white, false)
			if d*scale > 50 {
				b.text(x(at+d/2), 53, sansBold, 9, white, draw.XCenter, fmt.Sprintf("%s %s", q.name, thousands(int(d))))
			}
			at += d
		}
		b.text(x(total.Cores)+8, 53, sans, 9, black, draw.XLeft, thousands(int(total.Cores))+" card cores")
		for i, q := range shareQueues {
			y := 100 + float64(i)*rowH
			part := total.Cores * q.weight / weights
			d := deserved[i].Cores
			b.text(20, y+4, sansBold, 10, q.colour, draw.XLeft, q.name)
			b.text(20, y+18, sans, 9, black, draw.XLeft, fmt.Sprintf("weight %.0f of %.0f", q.weight, weights))
			b.rect(x(0), y, q.asks*scale, 14, 0, q.pale, q.colour, false)
			b.rect(x(0), y+16, d*scale, 14, 0, q.colour, nil, false)
			b.line(draw.LineStyle{Color: black, Width: 1.5, Dashes: []vg.Length{3, 2}}, x(part), y-4, x(part), y+34)
			b.text(x(math.Max(q.asks, math.Max(d, part)))+8, y+1, sans, 9, black, draw.XLeft,
				fmt.Sprintf("asks %s", thousands(int(q.asks))),
				fmt.Sprintf("deserves %s", thousands(int(math.Round(d)))))
			b.text(x(part)+3, y+33, sans, 8, grey, draw.XLeft, fmt.Sprintf("weight's part %s", thousands(int(part))))
		}
		b.text(20, 100+float64(len(shareQueues))*rowH+4, sans, 10, black, draw.XLeft, explainShares(total.Cores, weights, deserved)...)
	}), nil
}

// explainShares says in words what the picture shows: which queues ask less than their
// weight's part, and where what they leave goes.
func explainShares(total, weights float64, deserved []fairshare.Amount) []string {
	var under, over []string
	left := 0.0
	for i, q := range shareQueues {
		part := total * q.weight / weights
		if q.asks < part {
			under = append(under, q.name)
			left += part - q.asks
		} else {
			over = append(over, fmt.Sprintf("%s %s", q.name, thousands(int(math.Round(deserved[i].Cores-part)))))
		}
	}
	if len(under) == 0 {
		return []string{"Every queue asks for at least its weight's part, so each gets exactly that part."}
	}
	return []string{
		fmt.Sprintf("%s asks for less than its weight's part and gets all it asks. The %s card cores it leaves go to the others by weight", strings.Join(under, " and "), thousands(int(left))),
		fmt.Sprintf("(%s more), each up to what it asks: weighted max-min fairness.", strings.Join(over, ", ")),
	}
}
