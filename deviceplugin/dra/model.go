package dra

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/api"
)

// DriverName is the DRA driver's name: DeviceClasses select it (device.driver) and the
// scheduler writes it into every allocation result meant for this agent.
const DriverName = api.DRADriver

// Attribute and capacity names, in the driver's own domain (CEL reads them as
// device.attributes["vgpu.tessera.io"].uuid and device.capacity["vgpu.tessera.io"].memory).
const (
	AttrUUID        resourceapi.QualifiedName = "uuid"
	AttrModel       resourceapi.QualifiedName = "model"
	AttrProductName resourceapi.QualifiedName = "productName"
	AttrIndex       resourceapi.QualifiedName = "index"
	AttrNUMANode    resourceapi.QualifiedName = "numaNode"
	AttrLinkDomain  resourceapi.QualifiedName = "linkDomain"

	CapacityMemory = api.DRACapacityMemory
	CapacityCores  = api.DRACapacityCores
)

// Capacity policy. Memory is granted in whole MiB, the unit of vgpu-core's limit: a
// coarser step would either leave the card's last MiBs unclaimable or make the whole card
// (the capacity itself) an invalid amount, since NVML reports sizes that are not multiples
// of any round number (81559 MiB on an H100 80GB). The minimum keeps shares that cannot hold
// even one CUDA context off the card. Cores are percent of the card's SMs in steps of 1.
// A request that names neither capacity gets the defaults: all of the memory and
// 100 cores, the whole card.
const (
	// DefaultMinMemoryMiB is the smallest memory share when Options.MinMemoryMiB is 0.
	DefaultMinMemoryMiB = 256
	// MaxCores is the cores capacity of every card: percent of its SMs.
	MaxCores = api.DRAMaxCores
)

// Options tune the published model.
type Options struct {
	// Pool is the resource pool (the node's name).
	Pool string
	// MinMemoryMiB is the smallest memory a share may consume (DefaultMinMemoryMiB when
	// 0). A card smaller than that offers only itself whole.
	MinMemoryMiB int64
}

// DeviceName is the stable name of the device of card index i. It follows the NVML
// index, which the agent also publishes as the index attribute; the UUID is an attribute
// because DNS labels cannot start with "GPU-" in upper case.
func DeviceName(index int) string { return fmt.Sprintf("card-%d", index) }

// Resources is what the driver publishes for the node: one pool named after the node
// holding one device per card that is not in MIG mode (MIG cards are shared by MIG, not
// by Tessera). inv's cards carry their health and cordons (NodeInventory.WithCordons);
// reasons says why each unhealthy card is unhealthy.
func Resources(inv *api.NodeInventory, reasons map[string]string, opts Options) resourceslice.DriverResources {
	devs := Devices(inv, reasons, opts)
	pool := resourceslice.Pool{}
	// An empty pool still says "the driver runs and has no devices", so a slice is
	// published even then.
	for len(devs) > resourceapi.ResourceSliceMaxDevices {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs[:resourceapi.ResourceSliceMaxDevices]})
		devs = devs[resourceapi.ResourceSliceMaxDevices:]
	}
	pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs})
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{opts.Pool: pool}}
}

// Devices lists the cards as devices, in NVML index order.
func Devices(inv *api.NodeInventory, reasons map[string]string, opts Options) []resourceapi.Device {
	domains := LinkDomains(inv.Cards, inv.Links)
	out := make([]resourceapi.Device, 0, len(inv.Cards))
	for i, c := range inv.Cards {
		if c.MIG {
			continue
		}
		out = append(out, device(c, domains[i], reasons[c.UUID], opts))
	}
	return out
}

func device(c api.Card, domain, reason string, opts Options) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:        {StringValue: ptr.To(clip(c.UUID))},
		AttrModel:       {StringValue: ptr.To(clip(shortModel(c.Model)))},
		AttrProductName: {StringValue: ptr.To(clip(c.Model))},
		AttrIndex:       {IntValue: ptr.To(int64(c.Index))},
		AttrLinkDomain:  {StringValue: ptr.To(domain)},
	}
	if c.NUMA >= 0 {
		attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(c.NUMA))}
	}
	d := resourceapi.Device{
		Name:       DeviceName(c.Index),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: MemoryCapacity(c.MemoryMiB, opts.MinMemoryMiB),
			CapacityCores:  CoresCapacity(),
		},
		AllowMultipleAllocations: ptr.To(true),
		Taints:                   Taints(c, reason),
	}
	return d
}

// MemoryCapacity is a card's memory as consumable capacity: min..capacity in steps of
// 1 MiB, default the whole card. A card no larger than the minimum takes whole-card
// requests only (minimum, default and maximum are then its capacity).
func MemoryCapacity(cardMiB, minMiB int64) resourceapi.DeviceCapacity {
	if minMiB <= 0 {
		minMiB = DefaultMinMemoryMiB
	}
	// The API requires min + step <= capacity.
	if minMiB > cardMiB-1 {
		minMiB = cardMiB
	}
	total := MiB(cardMiB)
	policy := &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(total.DeepCopy()),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(MiB(minMiB)), Max: ptr.To(total.DeepCopy())},
	}
	if minMiB < cardMiB {
		policy.ValidRange.Step = ptr.To(MiB(1))
	}
	return resourceapi.DeviceCapacity{Value: total, RequestPolicy: policy}
}

// CoresCapacity is a card's compute as consumable capacity: 0..100 percent in steps of 1,
// default 100. Zero cores is Volcano's memory-only share: no SMs reserved, vgpu-core
// leaves the container uncapped.
func CoresCapacity() resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{
		Value: *resource.NewQuantity(MaxCores, resource.DecimalSI),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default: resource.NewQuantity(MaxCores, resource.DecimalSI),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{
				Min:  resource.NewQuantity(0, resource.DecimalSI),
				Max:  resource.NewQuantity(MaxCores, resource.DecimalSI),
				Step: resource.NewQuantity(1, resource.DecimalSI),
			},
		},
	}
}

// MiB is n MiB as a quantity in bytes, written with the Mi suffix ("4096Mi").
func MiB(n int64) resource.Quantity {
	return *resource.NewQuantity(n<<20, resource.BinarySI)
}

// shortModel drops the vendor's name: "NVIDIA H100 80GB HBM3" is model "H100 80GB HBM3".
func shortModel(name string) string {
	if s, ok := strings.CutPrefix(name, "NVIDIA "); ok && s != "" {
		return s
	}
	return name
}

// clip keeps a string attribute within the API's 64 bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= resourceapi.DeviceAttributeMaxValueLength {
		return s
	}
	n := resourceapi.DeviceAttributeMaxValueLength
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
