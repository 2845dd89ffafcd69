package nvmlfake

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// MIGOp names a MIG call that an injected fault can fail.
type MIGOp string

// The MIG calls a fault can fail.
const (
	OpCreateGpuInstance      MIGOp = "CreateGpuInstanceWithPlacement"
	OpCreateComputeInstance  MIGOp = "CreateComputeInstance"
	OpDestroyGpuInstance     MIGOp = "GpuInstance.Destroy"
	OpDestroyComputeInstance MIGOp = "ComputeInstance.Destroy"
)

// MIGFault makes the (Skip+1)-th call of Op on a card return Ret instead of acting,
// once. Faults on one card fire in the order they were injected.
type MIGFault struct {
	Op   MIGOp
	Skip int
	Ret  nvml.Return
}

// MIGInstanceState is one compute instance as the fake holds it, for assertions.
type MIGInstanceState struct {
	Profile     string
	GI, CI      int
	Start, Size int
	UUID        string
}

// MIGCards returns a machine of MIG-capable cards, MIG mode enabled and no instances.
func MIGCards(models ...MIGModel) *Machine {
	specs := make([]CardSpec, len(models))
	for i := range models {
		model := models[i]
		specs[i] = CardSpec{Name: model.Name, MemoryMiB: model.MemoryMiB, SMs: model.SMs, MIG: true, MIGModel: &model}
	}
	return NewMachine(specs)
}

// migCard is one card's MIG state; Machine.mu guards it.
type migCard struct {
	model         MIGModel
	mode, pending int
	gis           []*gpuInstance
	nextGI        uint32
	serial        int
	faults        []MIGFault
}

type gpuInstance struct {
	mock.GpuInstance
	card      int
	info      nvml.GpuInstanceInfo
	profile   MIGProfile
	cis       []*computeInstance
	nextCI    uint32
	destroyed bool
}

type computeInstance struct {
	mock.ComputeInstance
	gi        *gpuInstance
	info      nvml.ComputeInstanceInfo
	slices    int
	sms       uint32
	uuid      string
	dev       *mock.Device
	procs     []nvml.ProcessInfo
	destroyed bool
}

// attachMIG gives card i's device its MIG calls. A card without a MIGModel only
// reports the mode its spec says and supports no GPU-instance profile.
func (m *Machine) attachMIG(d *mock.Device, i int) {
	s := m.specs[i]
	if s.MIGModel == nil {
		d.GetMigModeFunc = func() (int, int, nvml.Return) {
			if s.MIG {
				return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
			}
			return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
		}
		d.GetGpuInstanceProfileInfoFunc = func(int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if s.MIG {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	c := &migCard{model: *s.MIGModel, mode: mode, pending: mode}
	m.mig[i] = c
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if m.isLost(i) {
			return 0, 0, nvml.ERROR_GPU_IS_LOST
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return c.mode, c.pending, nvml.SUCCESS
	}
	d.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) { return m.setMigMode(i, mode) }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetGpuInstanceProfileInfoFunc = func(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if id < 0 || id >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		p, ok := c.model.Profile(id)
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return profileInfo(p), nvml.SUCCESS
	}
	// GetGpuInstanceProfileInfoV is left out on purpose: go-nvml's handler type keeps
	// its device in an unexported field and always calls the real library, so no mock
	// can answer it. The agent uses the V1 call.
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		p, ok := c.model.Profile(int(info.Id))
		if !ok {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		out := make([]nvml.GpuInstancePlacement, len(p.Starts))
		for k, st := range p.Starts {
			out[k] = nvml.GpuInstancePlacement{Start: uint32(st), Size: uint32(p.Size)}
		}
		return out, nvml.SUCCESS
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if info == nil || pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return m.createGI(i, int(info.Id), func(MIGProfile) (nvml.GpuInstancePlacement, bool) { return *pl, true })
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return m.createGI(i, int(info.Id), func(p MIGProfile) (nvml.GpuInstancePlacement, bool) {
			for _, st := range p.Starts {
				if !c.overlaps(st, p.Size) {
					return nvml.GpuInstancePlacement{Start: uint32(st), Size: uint32(p.Size)}, true
				}
			}
			return nvml.GpuInstancePlacement{}, false
		})
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		if info == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if c.mode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.GpuInstance
		for _, gi := range c.gis {
			if gi.profile.ID == int(info.Id) {
				out = append(out, gi)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, gi := range c.gis {
			if int(gi.info.Id) == id {
				return gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetMigDeviceHandleByIndexFunc = func(idx int) (nvml.Device, nvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		all := c.computeInstances()
		if idx < 0 || idx >= len(all) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return all[idx].dev, nvml.SUCCESS
	}
}

func profileInfo(p MIGProfile) nvml.GpuInstanceProfileInfo {
	info := nvml.GpuInstanceProfileInfo{Id: uint32(p.ID), SliceCount: uint32(p.Slices), InstanceCount: uint32(p.Instances),
		MultiprocessorCount: p.SMs, CopyEngineCount: uint32(p.Slices), MemorySizeMB: p.MemoryMiB}
	if p.Media {
		info.DecoderCount, info.JpegCount, info.OfaCount = 1, 1, 1
	}
	return info
}

func (m *Machine) setMigMode(i, mode int) (nvml.Return, nvml.Return) {
	if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	if m.isLost(i) {
		return nvml.ERROR_GPU_IS_LOST, nvml.ERROR_GPU_IS_LOST
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.mig[i]
	c.pending = mode
	// As NVML documents: the mode waits, pending, for a reset that an idle card allows.
	if m.busyLocked(i) || (mode == nvml.DEVICE_MIG_DISABLE && len(c.gis) > 0) {
		return nvml.SUCCESS, nvml.ERROR_IN_USE
	}
	c.mode = mode
	return nvml.SUCCESS, nvml.SUCCESS
}

// ResetCard resets card i as a GPU reset does: a pending MIG mode takes effect and
// every MIG instance is lost. It refuses (false) while processes run on the card.
func (m *Machine) ResetCard(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busyLocked(i) {
		return false
	}
	if c := m.mig[i]; c != nil {
		for _, gi := range c.gis {
			gi.destroy()
		}
		c.gis, c.mode = nil, c.pending
	}
	return true
}

// busyLocked says whether card i or one of its MIG devices runs a process.
func (m *Machine) busyLocked(i int) bool {
	if len(m.procs[i]) > 0 {
		return true
	}
	if c := m.mig[i]; c != nil {
		for _, ci := range c.computeInstances() {
			if len(ci.procs) > 0 {
				return true
			}
		}
	}
	return false
}

// InjectMIGFault queues a fault for card i's MIG calls.
func (m *Machine) InjectMIGFault(i int, f MIGFault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mig[i].faults = append(m.mig[i].faults, f)
}

// faultLocked consumes one call of op and returns the fault's code when it fires.
func (c *migCard) faultLocked(op MIGOp) (nvml.Return, bool) {
	for k := range c.faults {
		f := &c.faults[k]
		if f.Op != op {
			continue
		}
		if f.Skip > 0 {
			f.Skip--
			return 0, false
		}
		ret := f.Ret
		c.faults = slices.Delete(c.faults, k, k+1)
		return ret, true
	}
	return 0, false
}

// SetMIGProcesses sets what NVML lists as the compute processes of the MIG device
// with this UUID; false when no such device exists.
func (m *Machine) SetMIGProcesses(uuid string, procs []nvml.ProcessInfo) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.mig {
		if c == nil {
			continue
		}
		for _, ci := range c.computeInstances() {
			if ci.uuid == uuid {
				ci.procs = append([]nvml.ProcessInfo(nil), procs...)
				return true
			}
		}
	}
	return false
}

// MIGInstances lists card i's compute instances in NVML's MIG device order.
func (m *Machine) MIGInstances(i int) []MIGInstanceState {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []MIGInstanceState
	for _, ci := range m.mig[i].computeInstances() {
		gi := ci.gi
		out = append(out, MIGInstanceState{Profile: gi.profile.Name, GI: int(gi.info.Id), CI: int(ci.info.Id),
			Start: int(gi.info.Placement.Start), Size: int(gi.info.Placement.Size), UUID: ci.uuid})
	}
	return out
}

// MIGGPUInstances counts card i's GPU instances, with or without compute instances.
func (m *Machine) MIGGPUInstances(i int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mig[i].gis)
}

// computeInstances lists every compute instance by GPU instance ID, then CI ID.
func (c *migCard) computeInstances() []*computeInstance {
	var out []*computeInstance
	for _, gi := range c.gis {
		out = append(out, gi.cis...)
	}
	return out
}

func (c *migCard) overlaps(start, size int) bool {
	for _, gi := range c.gis {
		s, n := int(gi.info.Placement.Start), int(gi.info.Placement.Size)
		if start < s+n && s < start+size {
			return true
		}
	}
	return false
}

// CreateMIGDevice creates on card i a GPU instance of the named profile at memory slice
// start, with one compute instance spanning it, through the card's own NVML calls (so
// placement rules, counts and injected faults apply), and returns the MIG device's UUID.
func (m *Machine) CreateMIGDevice(i int, profile string, start int) (string, error) {
	if i < 0 || i >= len(m.Devices) || m.mig[i] == nil {
		return "", fmt.Errorf("card %d is not a MIG-capable card of this machine", i)
	}
	p, ok := m.mig[i].model.ProfileByName(profile)
	if !ok {
		return "", fmt.Errorf("card %d (%s) has no MIG profile %q", i, m.mig[i].model.Name, profile)
	}
	d := m.Devices[i]
	info, ret := d.GetGpuInstanceProfileInfo(p.ID)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("profile %s: %v", profile, ret)
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.Size)})
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("create %s at slice %d: %v", profile, start, ret)
	}
	ciID, _ := computeProfileID(p.Slices)
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("compute profile of %s: %v", profile, ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("create the compute instance of %s at slice %d: %v", profile, start, ret)
	}
	return ci.(*computeInstance).uuid, nil
}

// DestroyMIGDevice destroys the MIG device with this UUID and its GPU instance (its
// compute instances first), through their own NVML calls, as an administrator running
// nvidia-smi would.
func (m *Machine) DestroyMIGDevice(uuid string) error {
	m.mu.Lock()
	var gi *gpuInstance
	for _, c := range m.mig {
		if c == nil {
			continue
		}
		for _, g := range c.gis {
			for _, ci := range g.cis {
				if ci.uuid == uuid {
					gi = g
				}
			}
		}
	}
	var cis []*computeInstance
	if gi != nil {
		cis = append(cis, gi.cis...)
	}
	m.mu.Unlock()
	if gi == nil {
		return fmt.Errorf("no MIG device %s on this machine", uuid)
	}
	for _, ci := range cis {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("destroy a compute instance of %s: %v", uuid, ret)
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("destroy the GPU instance of %s: %v", uuid, ret)
	}
	return nil
}
