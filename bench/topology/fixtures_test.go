package topology

import (
	"fmt"

	"github.com/tessera-gpu/tessera/api"
)

// The machines of the engine's fixtures, rebuilt here because test files do not
// export across modules.

// inventory builds n cards, the first half on NUMA node 0, with link(i, j) for i < j.
func inventory(n int, link func(i, j int) api.LinkType) *api.NodeInventory {
	inv := &api.NodeInventory{Version: api.InventoryVersion, Links: make([][]api.LinkType, n)}
	for i := 0; i < n; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "NVIDIA A100-SXM4-80GB",
			MemoryMiB: 81920, NUMA: i * 2 / n, Shares: 1, Healthy: true})
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

// dgx1 is the DGX-1 V100 hybrid cube mesh.
func dgx1(i, j int) api.LinkType {
	l, ok := map[[2]int]api.LinkType{
		{0, 1}: "NV1", {0, 2}: "NV1", {0, 3}: "NV2", {0, 4}: "NV2",
		{1, 2}: "NV2", {1, 3}: "NV1", {1, 5}: "NV2",
		{2, 3}: "NV2", {2, 6}: "NV1",
		{3, 7}: "NV1",
		{4, 5}: "NV1", {4, 6}: "NV1", {4, 7}: "NV2",
		{5, 6}: "NV2", {5, 7}: "NV1",
		{6, 7}: "NV2",
	}[[2]int{i, j}]
	if !ok {
		return api.LinkCrossNUMA
	}
	return l
}

// pciePairs: two cards per PCIe switch, one switch per CPU.
func pciePairs(i, j int) api.LinkType {
	if i/2 == j/2 {
		return api.LinkPCIeSingle
	}
	return api.LinkCrossNUMA
}

// twoSocket: pairs per switch, quads per switch tree, eight cards per CPU.
func twoSocket(i, j int) api.LinkType {
	switch {
	case i/2 == j/2:
		return api.LinkPCIeSingle
	case i/4 == j/4:
		return api.LinkPCIeMulti
	case i/8 == j/8:
		return api.LinkSameNUMA
	}
	return api.LinkCrossNUMA
}
