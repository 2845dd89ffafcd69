package discovery

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/api"
)

// MIGDevice is one MIG device (a compute instance in a GPU instance) on a card in
// MIG mode.
type MIGDevice struct {
	api.MIGInstance
	// ParentUUID is the UUID of the card the device is carved from.
	ParentUUID string
	Handle     nvml.Device
}

// MIGProfile is one GPU-instance profile a card offers, named as nvidia-smi names it.
type MIGProfile struct {
	Name string
	Info nvml.GpuInstanceProfileInfo
	// Placements are every place NVML allows the profile, free or not.
	Placements []nvml.GpuInstancePlacement
}

// MIGProfiles lists the GPU-instance profiles card h offers, in NVML profile ID
// order. A profile NVML does not support on the card is left out.
func MIGProfiles(h nvml.Device, cardMiB uint64) ([]MIGProfile, error) {
	var out []MIGProfile
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := h.GetGpuInstanceProfileInfo(id)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: GetGpuInstanceProfileInfo(%d): %v", ErrNVML, id, ret)
		}
		places, ret := h.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: GetGpuInstancePossiblePlacements(%d): %v", ErrNVML, id, ret)
		}
		out = append(out, MIGProfile{Name: MIGProfileName(info, cardMiB), Info: info, Placements: places})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the card offers no GPU instance profile", ErrNVML)
	}
	return out, nil
}

// MIGProfileName names a GPU-instance profile as nvidia-smi does: compute slices, then
// the memory in GB, which is the profile's share of the card rounded up to eighths,
// times the card's size in GB ("1g.5gb" on a 40 GB A100, "1g.23gb" on a 180 GB B200),
// then a suffix for the media-engine variants.
func MIGProfileName(info nvml.GpuInstanceProfileInfo, cardMiB uint64) string {
	gb := uint64(0)
	if cardMiB > 0 {
		eighths := min((info.MemorySizeMB*8+cardMiB-1)/cardMiB, 8)
		cardGB := (cardMiB + 1023) / 1024
		gb = (eighths*cardGB*2 + 8) / 16 // eighths*cardGB/8, rounded half up
	}
	name := fmt.Sprintf("%dg.%dgb", info.SliceCount, max(gb, 1))
	switch info.Id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		name += "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	}
	return name
}

// giShape is what the MIG devices of one GPU instance share.
type giShape struct {
	profile   string
	placement nvml.GpuInstancePlacement
}

// MaxMIGInstances is the most GPU instances the profile table allows on one card: the
// largest instance count of any profile (7 of the 1-slice profile on an A100 or H100).
// No layout of the card holds more.
func MaxMIGInstances(profiles []MIGProfile) int {
	n := 0
	for _, p := range profiles {
		n = max(n, int(p.Info.InstanceCount))
	}
	return n
}

// ReadMIGDevices lists the MIG devices of card h (in MIG mode) in NVML's order, with
// the profile and placement of each one's GPU instance.
func ReadMIGDevices(h nvml.Device, parentUUID string, cardMiB uint64) ([]MIGDevice, error) {
	profiles, err := MIGProfiles(h, cardMiB)
	if err != nil {
		return nil, err
	}
	return readMIGDevices(h, parentUUID, profiles)
}

// readMIGDevices is ReadMIGDevices with the card's profiles already read.
func readMIGDevices(h nvml.Device, parentUUID string, profiles []MIGProfile) ([]MIGDevice, error) {
	shapes := map[int]giShape{}
	for _, p := range profiles {
		gis, ret := h.GetGpuInstances(&p.Info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: GetGpuInstances(%s): %v", ErrNVML, p.Name, ret)
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("%w: GpuInstance.GetInfo (%s): %v", ErrNVML, p.Name, ret)
			}
			shapes[int(info.Id)] = giShape{profile: p.Name, placement: info.Placement}
		}
	}
	n, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: GetMaxMigDeviceCount: %v", ErrNVML, ret)
	}
	out := []MIGDevice{}
	for i := 0; i < n; i++ {
		md, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // NVML leaves gaps where no instance sits
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: GetMigDeviceHandleByIndex(%d): %v", ErrNVML, i, ret)
		}
		d, err := readMIGDevice(md, shapes)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		d.ParentUUID = parentUUID
		out = append(out, d)
	}
	return out, nil
}

func readMIGDevice(md nvml.Device, shapes map[int]giShape) (MIGDevice, error) {
	uuid, ret := md.GetUUID()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%w: GetUUID: %v", ErrNVML, ret)
	}
	giID, ret := md.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%w: %s: GetGpuInstanceId: %v", ErrNVML, uuid, ret)
	}
	ciID, ret := md.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return MIGDevice{}, fmt.Errorf("%w: %s: GetComputeInstanceId: %v", ErrNVML, uuid, ret)
	}
	mem, ret := md.GetMemoryInfo()
	if ret != nvml.SUCCESS || mem.Total == 0 {
		return MIGDevice{}, fmt.Errorf("%w: %s: GetMemoryInfo: %v", ErrNVML, uuid, ret)
	}
	shape, ok := shapes[giID]
	if !ok {
		return MIGDevice{}, fmt.Errorf("%w: %s: GPU instance %d is not listed under any profile", errMIGView, uuid, giID)
	}
	d := MIGDevice{Handle: md, MIGInstance: api.MIGInstance{UUID: uuid, Profile: shape.profile, GI: giID, CI: ciID,
		Start: int(shape.placement.Start), Size: int(shape.placement.Size), MemoryMiB: int64(mem.Total >> 20)}}
	if attrs, ret := md.GetAttributes(); ret == nvml.SUCCESS {
		d.SMCount = int(attrs.MultiprocessorCount)
	}
	return d, nil
}

// errMIGView is wrapped when NVML's answers about one card contradict each other.
var errMIGView = errors.New("inconsistent MIG view")
