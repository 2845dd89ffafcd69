// Package nvmlfake builds fake NVML machines on go-nvml's mocks for the node agent's
// tests: shapes of our own (NUMA splits, NVLink pairs, a failing card, 16 cards) and
// go-nvml's DGX A100 completed with the queries its mock leaves out.
package nvmlfake

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// CardSpec describes one fake card.
type CardSpec struct {
	Name      string
	MemoryMiB uint64
	SMs       uint32
	NUMA      int
	MIG       bool
	// NVLinks maps another card's index to the number of direct NVLinks to it.
	NVLinks map[int]int
	// BrokenUUID makes GetUUID fail, as a card that fell off the bus does.
	BrokenUUID bool
	// MIGModel, when set, makes the card MIG-capable with this profile table (see
	// mig.go); MIG then says whether MIG mode starts enabled.
	MIGModel *MIGModel
}

// Machine is a fake NVML library. Its state may be changed while the agent runs.
type Machine struct {
	*mock.Interface
	Devices []*mock.Device

	mu     sync.Mutex
	specs  []CardSpec
	uuids  []string
	lost   []bool
	procs  [][]nvml.ProcessInfo
	mig    []*migCard // nil for a card without a MIGModel
	events chan nvml.EventData
}

// NewMachine builds a machine; cards on the same NUMA node share a host bridge.
func NewMachine(specs []CardSpec) *Machine {
	m := &Machine{specs: specs, lost: make([]bool, len(specs)), procs: make([][]nvml.ProcessInfo, len(specs)),
		mig: make([]*migCard, len(specs)), events: make(chan nvml.EventData, 64)}
	for i := range specs {
		m.uuids = append(m.uuids, fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i+1, i+1))
		m.Devices = append(m.Devices, m.newDevice(i))
	}
	m.Interface = &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(m.Devices), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(m.Devices) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return m.Devices[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) { return m.eventSet(), nvml.SUCCESS },
	}
	return m
}

// SetProcesses sets what NVML lists as card i's compute processes (none by default).
func (m *Machine) SetProcesses(i int, procs []nvml.ProcessInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.procs[i] = append([]nvml.ProcessInfo(nil), procs...)
}

func (m *Machine) processes(i int) ([]nvml.ProcessInfo, nvml.Return) {
	if m.isLost(i) {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]nvml.ProcessInfo(nil), m.procs[i]...), nvml.SUCCESS
}

// UUID returns card i's UUID.
func (m *Machine) UUID(i int) string { return m.uuids[i] }

// SetLost makes card i fail (or stop failing) every query, as ERROR_GPU_IS_LOST.
func (m *Machine) SetLost(i int, lost bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lost[i] = lost
}

// InjectXID delivers an XID critical-error event for card i.
func (m *Machine) InjectXID(i int, xid uint64) {
	m.events <- nvml.EventData{Device: m.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

func (m *Machine) isLost(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost[i]
}

func (m *Machine) eventSet() nvml.EventSet {
	return &mock.EventSet{
		WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-m.events:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(timeoutMs) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
}

func (m *Machine) newDevice(i int) *mock.Device {
	s := m.specs[i]
	busID := fmt.Sprintf("0000:%02x:00.0", 0x10+i)
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) {
		if s.BrokenUUID || m.isLost(i) {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return m.uuids[i], nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) { return s.Name, nvml.SUCCESS }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return m.processes(i) }
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if m.isLost(i) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Memory{Total: s.MemoryMiB << 20}, nvml.SUCCESS
	}
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return i, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(busID), nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{MultiprocessorCount: s.SMs}, nvml.SUCCESS
	}
	m.attachMIG(d, i)
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return s.NUMA, nvml.SUCCESS }
	peers := nvlinkPeers(s.NVLinks)
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if l < len(peers) {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		if l >= len(peers) {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return pciInfo(fmt.Sprintf("0000:%02x:00.0", 0x10+peers[l])), nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j := m.indexOf(other)
		if j < 0 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if m.specs[j].NUMA == s.NUMA {
			return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	return d
}

func (m *Machine) indexOf(d nvml.Device) int {
	for i, x := range m.Devices {
		if nvml.Device(x) == d {
			return i
		}
	}
	return -1
}

// nvlinkPeers lists, per link number, the card index at its far end.
func nvlinkPeers(links map[int]int) []int {
	var out []int
	for j := 0; j < 64; j++ {
		for k := 0; k < links[j]; k++ {
			out = append(out, j)
		}
	}
	return out
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	copy(p.BusId[:], "0000"+bus) // NVML's 8-digit domain form
	return p
}
