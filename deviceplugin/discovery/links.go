package discovery

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// linkMatrix builds the symmetric link matrix in nvidia-smi topo notation. NVLinks win
// over the PCIe path. Links that end on an NVSwitch (a remote bus ID that is not one of
// the cards) connect the card to every other switch-attached card, as on DGX systems.
// A pair NVML cannot describe is reported as SYS, the worst link, so the scheduler never
// believes in a connection that may not exist.
func linkMatrix(devs []Device) [][]api.LinkType {
	n := len(devs)
	byBus := make(map[string]int, n)
	for i, d := range devs {
		if d.PCIBusID != "" {
			byBus[d.PCIBusID] = i
		}
	}
	direct := make([][]int, n)
	switchLinks := make([]int, n)
	for i, d := range devs {
		direct[i] = make([]int, n)
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			state, ret := d.Handle.GetNvLinkState(l)
			if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
				continue
			}
			remote, ret := d.Handle.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				continue
			}
			if j, ok := byBus[busID(remote)]; ok && j != i {
				direct[i][j]++
			} else if !ok {
				switchLinks[i]++
			}
		}
	}
	links := make([][]api.LinkType, n)
	for i := range links {
		links[i] = make([]api.LinkType, n)
		links[i][i] = api.LinkSelf
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			l := pairLink(devs[i], devs[j], direct[i][j], direct[j][i], switchLinks[i], switchLinks[j])
			links[i][j], links[j][i] = l, l
		}
	}
	return links
}

func pairLink(a, b Device, ab, ba, swA, swB int) api.LinkType {
	nv := max(ab, ba)
	if nv == 0 && swA > 0 && swB > 0 {
		nv = min(swA, swB)
	}
	if nv > 0 {
		return api.LinkType(fmt.Sprintf("NV%d", min(nv, 99)))
	}
	level, ret := a.Handle.GetTopologyCommonAncestor(b.Handle)
	if ret != nvml.SUCCESS {
		klog.V(2).InfoS("PCIe path between cards unknown; reporting SYS", "a", a.Card.UUID, "b", b.Card.UUID, "nvml", ret)
		return api.LinkCrossNUMA
	}
	return topologyLink(level)
}

func topologyLink(level nvml.GpuTopologyLevel) api.LinkType {
	switch level {
	case nvml.TOPOLOGY_INTERNAL:
		return api.LinkSameBoard
	case nvml.TOPOLOGY_SINGLE:
		return api.LinkPCIeSingle
	case nvml.TOPOLOGY_MULTIPLE:
		return api.LinkPCIeMulti
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return api.LinkHostBridge
	case nvml.TOPOLOGY_NODE:
		return api.LinkSameNUMA
	}
	return api.LinkCrossNUMA
}
