// Package discovery reads the node's cards through NVML: identity, memory, SM count,
// NUMA node, MIG mode and MIG devices, and the link between every pair of cards.
package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// ErrNVML is wrapped when an NVML call that discovery cannot do without fails.
var ErrNVML = errors.New("nvml")

// ErrNoCards is returned when NVML works but reports no usable card.
var ErrNoCards = errors.New("no usable cards")

// Options tune what discovery reports.
type Options struct {
	// Shares is the number of kubelet slots (containers at once) per card; a card in MIG
	// mode offers at least as many as its profile table allows instances on one card
	// (MaxMIGInstances), and one per MIG device it holds.
	Shares int
	// SysfsRoot is where PCI devices are looked up when NVML cannot tell a card's NUMA
	// node ("/sys" on a real node; empty skips the fallback).
	SysfsRoot string
}

// Device is one discovered card with the NVML handle the health checks use.
type Device struct {
	Card     api.Card
	Minor    int
	PCIBusID string
	Handle   nvml.Device
	// MIGDevices are the card's MIG devices when it is in MIG mode (Card.MIGInstances
	// carries the same, for the inventory); nil when the layout could not be read.
	MIGDevices []MIGDevice
}

// Result is what one discovery pass found.
type Result struct {
	Devices []Device
	// Links[i][j] is the link between Devices[i] and Devices[j].
	Links [][]api.LinkType
	// Skipped names the cards NVML reported but that could not be read, with the reason.
	Skipped []string
	Driver  string
}

// Cards returns the api view of the discovered cards, in index order.
func (r *Result) Cards() []api.Card {
	out := make([]api.Card, len(r.Devices))
	for i, d := range r.Devices {
		out[i] = d.Card
	}
	return out
}

// Discover reads every card NVML reports. The caller has initialised lib. A card whose
// identity or memory cannot be read is skipped and named in Result.Skipped; fields
// NVML does not support on a card keep their "unknown" values.
func Discover(lib nvml.Interface, opts Options) (*Result, error) {
	if opts.Shares < 1 {
		return nil, fmt.Errorf("discovery: shares per card is %d, want at least 1", opts.Shares)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: DeviceGetCount: %v", ErrNVML, ret)
	}
	res := &Result{}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		res.Driver = v
	}
	for i := 0; i < n; i++ {
		d, err := readDevice(lib, i, opts)
		if err != nil {
			klog.ErrorS(err, "Skipping card that NVML cannot read", "index", i)
			res.Skipped = append(res.Skipped, fmt.Sprintf("index %d: %v", i, err))
			continue
		}
		res.Devices = append(res.Devices, d)
	}
	if len(res.Devices) == 0 {
		return res, fmt.Errorf("%w: NVML reports %d cards, skipped %v", ErrNoCards, n, res.Skipped)
	}
	res.Links = linkMatrix(res.Devices)
	klog.InfoS("Discovered cards", "count", len(res.Devices), "skipped", len(res.Skipped), "driver", res.Driver)
	return res, nil
}

func readDevice(lib nvml.Interface, index int, opts Options) (Device, error) {
	h, ret := lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("%w: DeviceGetHandleByIndex: %v", ErrNVML, ret)
	}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("%w: GetUUID: %v", ErrNVML, ret)
	}
	name, ret := h.GetName()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("%w: card %s: GetName: %v", ErrNVML, uuid, ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS || mem.Total == 0 {
		return Device{}, fmt.Errorf("%w: card %s: GetMemoryInfo: %v", ErrNVML, uuid, ret)
	}
	d := Device{Handle: h, Minor: -1, Card: api.Card{
		UUID: uuid, Index: index, Model: sanitizeModel(name), MemoryMiB: int64(mem.Total >> 20),
		NUMA: -1, Shares: opts.Shares, Healthy: true,
	}}
	if minor, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		d.Minor = minor
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.PCIBusID = busID(pci)
	}
	if attrs, ret := h.GetAttributes(); ret == nvml.SUCCESS {
		d.Card.SMCount = int(attrs.MultiprocessorCount)
	} else {
		klog.V(4).InfoS("SM count unknown", "uuid", uuid, "nvml", ret)
	}
	if mode, _, ret := h.GetMigMode(); ret == nvml.SUCCESS {
		d.Card.MIG = mode == nvml.DEVICE_MIG_ENABLE
	}
	if d.Card.MIG {
		readMIGLayout(&d)
	}
	d.Card.NUMA = numaNode(h, d.PCIBusID, opts.SysfsRoot)
	return d, nil
}

// readMIGLayout fills in a MIG-mode card's devices and its slot count. A layout NVML
// cannot report is logged and left unknown: the card itself is still discovered.
//
// Each instance goes to one container whole, and the kubelet admits a container only
// with a free slot of the card, so the card offers a slot for every instance it could
// hold, not only for those it holds now: its instances may be re-partitioned into more
// (two 3g into seven 1g) while the agent runs, and the kubelet must then already have
// a slot for each of the pods the scheduler places on them.
func readMIGLayout(d *Device) {
	mem := uint64(d.Card.MemoryMiB)
	profiles, err := MIGProfiles(d.Handle, mem)
	if err != nil {
		klog.ErrorS(err, "Cannot read the card's MIG profiles", "uuid", d.Card.UUID)
		return
	}
	d.Card.Shares = max(d.Card.Shares, MaxMIGInstances(profiles))
	devs, err := readMIGDevices(d.Handle, d.Card.UUID, profiles)
	if err != nil {
		klog.ErrorS(err, "Cannot read the card's MIG devices", "uuid", d.Card.UUID)
		return
	}
	d.MIGDevices = devs
	d.Card.MIGInstances = make([]api.MIGInstance, len(devs))
	for i, m := range devs {
		d.Card.MIGInstances[i] = m.MIGInstance
	}
	// No card should hold more instances than its table allows; if NVML ever lists
	// more, each still gets a slot.
	d.Card.Shares = max(d.Card.Shares, len(devs))
	klog.V(4).InfoS("Read MIG devices", "uuid", d.Card.UUID, "count", len(devs), "slots", d.Card.Shares)
}

// numaNode asks NVML first and falls back to the PCI device's sysfs entry, which is
// what older drivers leave as the only source.
func numaNode(h nvml.Device, bus, sysfs string) int {
	if n, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS && n >= 0 {
		return n
	}
	if sysfs == "" || bus == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(sysfs, "bus/pci/devices", strings.ToLower(bus), "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// busID normalises NVML's PCI bus ID ("00000000:3B:00.0") to sysfs form ("0000:3b:00.0").
func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	s := strings.ToLower(string(b))
	if len(s) == 16 && strings.HasPrefix(s, "0000") {
		s = s[4:]
	}
	return s
}

// sanitizeModel keeps model names within the separators the api grammars reserve.
func sanitizeModel(name string) string {
	return strings.Map(func(r rune) rune {
		if r == ',' || r == ':' || r == ';' {
			return '-'
		}
		return r
	}, name)
}
