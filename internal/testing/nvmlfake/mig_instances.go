package nvmlfake

// GPU instances, compute instances and MIG device handles of the fake cards.

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func (m *Machine) createGI(i, id int, place func(MIGProfile) (nvml.GpuInstancePlacement, bool)) (nvml.GpuInstance, nvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.mig[i]
	if c.mode != nvml.DEVICE_MIG_ENABLE {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	p, ok := c.model.Profile(id)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	pl, ok := place(p)
	if !ok {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	if int(pl.Size) != p.Size || !slices.Contains(p.Starts, int(pl.Start)) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if ret, fail := c.faultLocked(OpCreateGpuInstance); fail {
		return nil, ret
	}
	same, media := 0, false
	for _, gi := range c.gis {
		if gi.profile.ID == p.ID {
			same++
		}
		media = media || gi.profile.Media
	}
	if same >= p.Instances || (p.Media && media) || c.overlaps(int(pl.Start), int(pl.Size)) {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	gi := &gpuInstance{card: i, profile: p,
		info: nvml.GpuInstanceInfo{Device: m.Devices[i], Id: c.freeGIID(), ProfileId: uint32(p.ID), Placement: pl}}
	m.attachGI(gi)
	c.gis = append(c.gis, gi)
	slices.SortFunc(c.gis, func(a, b *gpuInstance) int { return int(a.info.Id) - int(b.info.Id) })
	return gi, nvml.SUCCESS
}

// freeGIID returns the lowest unused GPU instance ID, as the driver does.
func (c *migCard) freeGIID() uint32 {
	for id := uint32(1); ; id++ {
		if !slices.ContainsFunc(c.gis, func(gi *gpuInstance) bool { return gi.info.Id == id }) {
			return id
		}
	}
}

func (gi *gpuInstance) destroy() {
	gi.destroyed = true
	for _, ci := range gi.cis {
		ci.destroyed = true
	}
}

func (m *Machine) attachGI(gi *gpuInstance) {
	c := m.mig[gi.card]
	gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if gi.destroyed {
			return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return gi.info, nvml.SUCCESS
	}
	gi.DestroyFunc = func() nvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		if gi.destroyed {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if ret, fail := c.faultLocked(OpDestroyGpuInstance); fail {
			return ret
		}
		if len(gi.cis) > 0 {
			return nvml.ERROR_IN_USE // NVML refuses while compute instances exist
		}
		gi.destroy()
		c.gis = slices.DeleteFunc(c.gis, func(x *gpuInstance) bool { return x == gi })
		return nvml.SUCCESS
	}
	gi.GetComputeInstanceProfileInfoFunc = func(id, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		if eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		for _, n := range computeSlices(gi.profile.Slices) {
			if pid, _ := computeProfileID(n); pid == id {
				return gi.computeProfile(n), nvml.SUCCESS
			}
		}
		if id < 0 || id >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return m.createCI(gi, int(info.SliceCount), int(info.Id))
	}
	gi.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []nvml.ComputeInstance
		for _, ci := range gi.cis {
			if int(ci.info.ProfileId) == int(info.Id) {
				out = append(out, ci)
			}
		}
		return out, nvml.SUCCESS
	}
}

func (gi *gpuInstance) computeProfile(n int) nvml.ComputeInstanceProfileInfo {
	id, _ := computeProfileID(n)
	sms := gi.profile.SMs
	if n != gi.profile.Slices {
		sms = gi.profile.SMs / uint32(gi.profile.Slices) * uint32(n)
	}
	return nvml.ComputeInstanceProfileInfo{Id: uint32(id), SliceCount: uint32(n), InstanceCount: uint32(gi.profile.Slices / n),
		MultiprocessorCount: sms, SharedCopyEngineCount: uint32(gi.profile.Slices)}
}

func (m *Machine) createCI(gi *gpuInstance, n, id int) (nvml.ComputeInstance, nvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.mig[gi.card]
	if gi.destroyed {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if pid, ok := computeProfileID(n); !ok || pid != id || !slices.Contains(computeSlices(gi.profile.Slices), n) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if ret, fail := c.faultLocked(OpCreateComputeInstance); fail {
		return nil, ret
	}
	used := 0
	for _, ci := range gi.cis {
		used += ci.slices
	}
	if used+n > gi.profile.Slices {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ciID := uint32(0)
	for slices.ContainsFunc(gi.cis, func(ci *computeInstance) bool { return ci.info.Id == ciID }) {
		ciID++
	}
	c.serial++
	ci := &computeInstance{gi: gi, slices: n, sms: gi.computeProfile(n).MultiprocessorCount,
		uuid: fmt.Sprintf("MIG-%08x-%04x-4%03x-8%03x-%012x", gi.card+1, gi.info.Id, ciID, c.serial, c.serial),
		info: nvml.ComputeInstanceInfo{Device: m.Devices[gi.card], GpuInstance: gi, Id: ciID, ProfileId: uint32(id),
			Placement: nvml.ComputeInstancePlacement{Start: uint32(used), Size: uint32(n)}}}
	m.attachCI(ci)
	gi.cis = append(gi.cis, ci)
	slices.SortFunc(gi.cis, func(a, b *computeInstance) int { return int(a.info.Id) - int(b.info.Id) })
	return ci, nvml.SUCCESS
}

func (m *Machine) attachCI(ci *computeInstance) {
	gi := ci.gi
	c := m.mig[gi.card]
	ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ci.destroyed {
			return nvml.ComputeInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return ci.info, nvml.SUCCESS
	}
	ci.DestroyFunc = func() nvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ci.destroyed {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if ret, fail := c.faultLocked(OpDestroyComputeInstance); fail {
			return ret
		}
		if len(ci.procs) > 0 {
			return nvml.ERROR_IN_USE
		}
		ci.destroyed = true
		gi.cis = slices.DeleteFunc(gi.cis, func(x *computeInstance) bool { return x == ci })
		return nvml.SUCCESS
	}
	ci.dev = m.migDevice(ci)
}

// migDevice is the MIG device handle NVML gives for a compute instance.
func (m *Machine) migDevice(ci *computeInstance) *mock.Device {
	gi, parent := ci.gi, m.Devices[ci.gi.card]
	d := &mock.Device{}
	gone := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return ci.destroyed
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) {
		if gone() {
			return "", nvml.ERROR_NOT_FOUND
		}
		return ci.uuid, nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		return m.specs[gi.card].Name + " MIG " + gi.profile.Name, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if gone() {
			return nvml.Memory{}, nvml.ERROR_NOT_FOUND
		}
		return nvml.Memory{Total: gi.profile.MemoryMiB << 20, Free: gi.profile.MemoryMiB << 20}, nvml.SUCCESS
	}
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return int(gi.info.Id), nvml.SUCCESS }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return int(ci.info.Id), nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{MultiprocessorCount: ci.sms, GpuInstanceSliceCount: uint32(gi.profile.Slices),
			ComputeInstanceSliceCount: uint32(ci.slices), SharedCopyEngineCount: uint32(gi.profile.Slices),
			MemorySizeMB: gi.profile.MemoryMiB}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return append([]nvml.ProcessInfo(nil), ci.procs...), nvml.SUCCESS
	}
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	return d
}
