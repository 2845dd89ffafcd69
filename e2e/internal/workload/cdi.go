package workload

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
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
	case r.Env["NVIDIA_VISIBLE_DEVICES"] == "void":
		return "cdi"
	case len(r.CDIDevices) == 0:
		return "env"
	default:
		return "both"
	}
}

// cardIndex is a card's index on its fake machine, the last group of its UUID
// (GPU-gpu-c-3, GPU-2f1c0a9e-0000-4000-8000-000000000003).
func cardIndex(uuid string) int {
	i, err := strconv.Atoi(uuid[strings.LastIndex(uuid, "-")+1:])
	if err != nil {
		return -1
	}
	return i
}

// checkCards checks the cards as the runtime got them: NVIDIA_VISIBLE_DEVICES naming
// exactly the assigned cards (env, both) or void (cdi); the CDI devices, if any, naming
// exactly the assigned cards, plus the hook in cdi mode; and in cdi mode the device nodes
// the runtime added from the toolkit's spec (/dev/nvidia<index>) being those cards'. A
// real runtime's record names no CDI devices, and has the cards' device nodes in both
// modes (env mode's come from NVIDIA_VISIBLE_DEVICES, as NVIDIA's runtime adds them).
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
	if r.Runtime != "" {
		return append(bad, checkCardNodes(r, mode, want)...)
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
		bad = append(bad, checkCardNodes(r, mode, want)...)
	}
	return bad
}

// checkCardNodes checks that the container's card device nodes are those of the cards.
func checkCardNodes(r CRIRecord, mode string, uuids []string) []string {
	var nodes, want []string
	for _, d := range r.Devices {
		if cardNode.MatchString(d.ContainerPath) {
			nodes = append(nodes, d.ContainerPath)
		}
	}
	for _, u := range uuids {
		want = append(want, "/dev/nvidia"+strconv.Itoa(cardIndex(u)))
	}
	sort.Strings(nodes)
	sort.Strings(want)
	if strings.Join(nodes, " ") != strings.Join(want, " ") {
		return []string{fmt.Sprintf("%s mode: card device nodes %v, want %v (the fake toolkit's /dev/nvidia<index>)", mode, nodes, want)}
	}
	return nil
}
