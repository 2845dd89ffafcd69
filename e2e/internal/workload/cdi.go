package workload

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The names the node agent hands over in CDI mode (docs/device-plugin.md, section 2).
const (
	cardKind = "nvidia.com/gpu"
	hookName = "tessera.io/vgpu=hook"
)

// cardNode matches a card's device node (/dev/nvidia<n>), not the control nodes.
var cardNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// HandoffMode says how a container's cards reached its runtime, from its CRI record:
// "env" (NVIDIA_VISIBLE_DEVICES only), "cdi" (CDI devices, NVIDIA_VISIBLE_DEVICES=void)
// or "both".
func HandoffMode(r CRIRecord) string {
	switch {
	case len(r.CDIDevices) == 0:
		return "env"
	case r.Env["NVIDIA_VISIBLE_DEVICES"] == "void":
		return "cdi"
	default:
		return "both"
	}
}

// checkCards checks the cards as the runtime got them: NVIDIA_VISIBLE_DEVICES naming
// exactly the assigned cards (env, both) or void (cdi); the CDI devices, if any, naming
// exactly the assigned cards, plus the hook in cdi mode; and in cdi mode the device nodes
// the runtime added from the toolkit's spec (/dev/nvidia<index>) being those cards'.
func checkCards(r CRIRecord, uuids []string) []string {
	var bad []string
	mode := HandoffMode(r)
	want := append([]string(nil), uuids...)
	sort.Strings(want)
	if mode != "cdi" {
		got := split(r.Env["NVIDIA_VISIBLE_DEVICES"])
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			bad = append(bad, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%q, cards %v", r.Env["NVIDIA_VISIBLE_DEVICES"], want))
		}
	}
	if mode == "env" {
		return bad
	}
	wantCDI := make([]string, 0, len(want)+1)
	for _, u := range want {
		wantCDI = append(wantCDI, cardKind+"="+u)
	}
	if mode == "cdi" {
		wantCDI = append(wantCDI, hookName)
	}
	got := append([]string(nil), r.CDIDevices...)
	sort.Strings(got)
	sort.Strings(wantCDI)
	if strings.Join(got, " ") != strings.Join(wantCDI, " ") {
		bad = append(bad, fmt.Sprintf("%s mode: CDI devices %v, want %v", mode, r.CDIDevices, wantCDI))
	}
	if mode == "cdi" {
		var nodes, wantNodes []string
		for _, d := range r.Devices {
			if cardNode.MatchString(d.ContainerPath) {
				nodes = append(nodes, d.ContainerPath)
			}
		}
		for _, u := range want {
			wantNodes = append(wantNodes, "/dev/nvidia"+u[strings.LastIndex(u, "-")+1:])
		}
		sort.Strings(nodes)
		sort.Strings(wantNodes)
		if strings.Join(nodes, " ") != strings.Join(wantNodes, " ") {
			bad = append(bad, fmt.Sprintf("cdi mode: card device nodes %v, want %v (the fake toolkit's /dev/nvidia<index>)", nodes, wantNodes))
		}
	}
	return bad
}
