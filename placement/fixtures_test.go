package placement

import (
	"fmt"

	"github.com/tessera-gpu/tessera/api"
)

// Topology fixtures of real machines, in nvidia-smi topo -m notation.

// inventory builds n A100-like cards with the given NUMA nodes and link function.
func inventory(n int, numa func(i int) int, link func(i, j int) api.LinkType) *api.NodeInventory {
	inv := &api.NodeInventory{Version: api.InventoryVersion, Links: make([][]api.LinkType, n)}
	for i := 0; i < n; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "NVIDIA A100-SXM4-80GB",
			MemoryMiB: 81920, NUMA: numa(i), Shares: 10, Healthy: true})
		inv.Links[i] = make([]api.LinkType, n)
		for j := 0; j < n; j++ {
			if i == j {
				inv.Links[i][j] = api.LinkSelf
			} else {
				inv.Links[i][j] = link(min(i, j), max(i, j))
			}
		}
	}
	if err := inv.Validate(); err != nil {
		panic(err)
	}
	return inv
}

func halves(n int) func(int) int { return func(i int) int { return i * 2 / n } }

// DGXA100 is eight A100s on NVSwitch: every pair has twelve NVLinks.
func DGXA100() *api.NodeInventory {
	return inventory(8, halves(8), func(i, j int) api.LinkType { return "NV12" })
}

// dgx1Links is the DGX-1 (V100) hybrid cube mesh: two fully linked quads of mixed
// single and double NVLinks, each card double-linked to its twin on the other CPU.
var dgx1Links = map[[2]int]api.LinkType{
	{0, 1}: "NV1", {0, 2}: "NV1", {0, 3}: "NV2", {0, 4}: "NV2",
	{1, 2}: "NV2", {1, 3}: "NV1", {1, 5}: "NV2",
	{2, 3}: "NV2", {2, 6}: "NV1",
	{3, 7}: "NV1",
	{4, 5}: "NV1", {4, 6}: "NV1", {4, 7}: "NV2",
	{5, 6}: "NV2", {5, 7}: "NV1",
	{6, 7}: "NV2",
}

// DGX1 is the DGX-1 V100: NVLink pairs as in dgx1Links, everything else across CPUs.
func DGX1() *api.NodeInventory {
	return inventory(8, halves(8), func(i, j int) api.LinkType {
		if l, ok := dgx1Links[[2]int{i, j}]; ok {
			return l
		}
		return api.LinkCrossNUMA
	})
}

// PCIePairs4 is a 4-card PCIe server: cards 0,1 behind one switch on CPU 0, cards
// 2,3 behind another on CPU 1.
func PCIePairs4() *api.NodeInventory {
	return inventory(4, halves(4), func(i, j int) api.LinkType {
		if i/2 == j/2 {
			return api.LinkPCIeSingle
		}
		return api.LinkCrossNUMA
	})
}

// TwoSocket16 is a 16-card, 2-socket PCIe server: pairs share a switch, quads share
// a switch tree, eight cards share a CPU.
func TwoSocket16() *api.NodeInventory {
	return inventory(16, halves(16), func(i, j int) api.LinkType {
		switch {
		case i/2 == j/2:
			return api.LinkPCIeSingle
		case i/4 == j/4:
			return api.LinkPCIeMulti
		case i/8 == j/8:
			return api.LinkSameNUMA
		}
		return api.LinkCrossNUMA
	})
}

// NVSwitch16 is sixteen cards on NVSwitch (as an HGX-2): eighteen NVLinks per pair.
func NVSwitch16() *api.NodeInventory {
	return inventory(16, halves(16), func(i, j int) api.LinkType { return "NV18" })
}
