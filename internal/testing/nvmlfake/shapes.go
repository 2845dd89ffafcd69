package nvmlfake

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// FourCardsTwoNUMA has cards 0,1 on NUMA node 0 joined by 4 NVLinks and cards 2,3 on
// NUMA node 1 joined by 4 NVLinks.
func FourCardsTwoNUMA() *Machine {
	spec := func(numa, peer int) CardSpec {
		return CardSpec{Name: "NVIDIA A30", MemoryMiB: 24576, SMs: 56, NUMA: numa, NVLinks: map[int]int{peer: 4}}
	}
	return NewMachine([]CardSpec{spec(0, 1), spec(0, 0), spec(1, 3), spec(1, 2)})
}

// WithFailingCard has three cards, the middle one unreadable.
func WithFailingCard() *Machine {
	c := CardSpec{Name: "Tesla T4", MemoryMiB: 15360, SMs: 40}
	bad := c
	bad.BrokenUUID = true
	return NewMachine([]CardSpec{c, bad, c})
}

// Cards returns n identical cards, the first half on NUMA node 0, the rest on node 1.
func Cards(n int) *Machine {
	specs := make([]CardSpec, n)
	for i := range specs {
		specs[i] = CardSpec{Name: "NVIDIA L40S", MemoryMiB: 46068, SMs: 142, NUMA: i * 2 / n}
	}
	return NewMachine(specs)
}

// DGXA100 is go-nvml's fake DGX A100 completed with what its mock does not model: NUMA
// nodes (cards 0-3 on node 0), SM counts, PCI bus IDs, 12 NVLinks per card to the
// NVSwitches, the PCIe hierarchy, event sets and (empty) process lists.
func DGXA100() *dgxa100.Server {
	s := dgxa100.New()
	for i, dev := range s.Devices {
		d := dev.(*dgxa100.Device)
		numa := i / 4
		bus := d.PciBusID
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return numa, nvml.SUCCESS }
		d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{MultiprocessorCount: 108}, nvml.SUCCESS
		}
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(bus), nvml.SUCCESS }
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if l < 12 {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			return pciInfo("0000:c0:00.0"), nvml.SUCCESS // an NVSwitch, not a card
		}
		d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if o.(*dgxa100.Device).Index/4 == numa {
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		// No process holds memory on a fake card.
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			// Like the driver, block for the timeout: returning at once would make a
			// waiting loop spin, and go-nvml's mock records every call it receives.
			WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
				time.Sleep(time.Duration(timeoutMs) * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return s
}

// NotSupported fills the queries go-nvml's DGX A100 mock leaves nil with
// ERROR_NOT_SUPPORTED, as an older driver answers them.
func NotSupported(s *dgxa100.Server) *dgxa100.Server {
	for _, dev := range s.Devices {
		d := dev.(*dgxa100.Device)
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{}, nvml.ERROR_NOT_SUPPORTED
		}
		d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED }
		d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
	}
	return s
}
