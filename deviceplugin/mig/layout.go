// Package mig changes the MIG layout of one card through NVML: it destroys the GPU
// instances a plan (placement/mig) does not keep, creates the missing ones at their
// placements with one compute instance spanning each, checks the result by reading it
// back, and puts the previous layout back when any step fails. It refuses a card on
// which any process runs.
package mig

import (
	"errors"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	planner "github.com/tessera-gpu/tessera/placement/mig"
)

// ErrNVML is wrapped when an NVML call fails.
var ErrNVML = errors.New("nvml")

// liveGI is one GPU instance on the card with what it takes to destroy and rebuild it.
type liveGI struct {
	planner.Instance
	handle  nvml.GpuInstance
	size    uint32 // memory slices of its placement
	profile discovery.MIGProfile
	// ciProfiles are the CI profile infos of its compute instances, in CI ID order.
	cis        []nvml.ComputeInstance
	ciProfiles []nvml.ComputeInstanceProfileInfo
}

// layout is what one read of the card found.
type layout struct {
	profiles []discovery.MIGProfile
	gis      []liveGI
}

func (l layout) geometry() planner.Geometry {
	g := make(planner.Geometry, len(l.gis))
	for i, gi := range l.gis {
		g[i] = gi.Instance
	}
	return g
}

func (l layout) profile(name string) (discovery.MIGProfile, bool) {
	for _, p := range l.profiles {
		if p.Name == name {
			return p, true
		}
	}
	return discovery.MIGProfile{}, false
}

// table converts NVML's profiles into the planner's terms. Memory slices are counted
// from the placements: the end of the furthest placement of any profile.
func (l layout) table() planner.Table {
	t := planner.Table{}
	for _, p := range l.profiles {
		pp := planner.Profile{Name: p.Name, Max: int(p.Info.InstanceCount)}
		for _, pl := range p.Placements {
			pp.Size = int(pl.Size)
			pp.Starts = append(pp.Starts, int(pl.Start))
			t.Slots = max(t.Slots, int(pl.Start+pl.Size))
		}
		t.Profiles = append(t.Profiles, pp)
	}
	return t
}

// readLayout reads the card's profiles and every GPU instance with its compute
// instances, GPU instances in start order.
func readLayout(dev nvml.Device, cardMiB uint64) (layout, error) {
	profiles, err := discovery.MIGProfiles(dev, cardMiB)
	if err != nil {
		return layout{}, err
	}
	l := layout{profiles: profiles}
	for _, p := range profiles {
		gis, ret := dev.GetGpuInstances(&p.Info)
		if ret != nvml.SUCCESS {
			return layout{}, fmt.Errorf("%w: GetGpuInstances(%s): %v", ErrNVML, p.Name, ret)
		}
		for _, h := range gis {
			info, ret := h.GetInfo()
			if ret != nvml.SUCCESS {
				return layout{}, fmt.Errorf("%w: GpuInstance.GetInfo (%s): %v", ErrNVML, p.Name, ret)
			}
			gi := liveGI{Instance: planner.Instance{Profile: p.Name, Start: int(info.Placement.Start)}, handle: h, size: info.Placement.Size, profile: p}
			if err := readComputeInstances(&gi); err != nil {
				return layout{}, err
			}
			l.gis = append(l.gis, gi)
		}
	}
	sort.Slice(l.gis, func(i, j int) bool { return l.gis[i].Start < l.gis[j].Start })
	return l, nil
}

func readComputeInstances(gi *liveGI) error {
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := gi.handle.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("%w: %s: GetComputeInstanceProfileInfo(%d): %v", ErrNVML, gi.Instance, id, ret)
		}
		cis, ret := gi.handle.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("%w: %s: GetComputeInstances(%d): %v", ErrNVML, gi.Instance, id, ret)
		}
		for _, ci := range cis {
			gi.cis = append(gi.cis, ci)
			gi.ciProfiles = append(gi.ciProfiles, info)
		}
	}
	return nil
}

// fullComputeProfile is the compute-instance profile that spans the whole GPU
// instance.
func fullComputeProfile(gi nvml.GpuInstance, slices uint32) (nvml.ComputeInstanceProfileInfo, error) {
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && info.SliceCount == slices {
			return info, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, fmt.Errorf("%w: no compute instance profile spans %d slices", ErrNVML, slices)
}
