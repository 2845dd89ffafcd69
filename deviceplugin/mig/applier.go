package mig

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	planner "github.com/tessera-gpu/tessera/placement/mig"
)

var (
	// ErrNotMIG is wrapped when the card is not in MIG mode.
	ErrNotMIG = errors.New("card is not in MIG mode")
	// ErrBusy is wrapped when a process runs on the card or one of its MIG devices:
	// the card is then left untouched.
	ErrBusy = errors.New("card is in use")
	// ErrVerify is wrapped when the layout read back after applying is not the plan.
	ErrVerify = errors.New("the layout read back differs from the plan")
	// ErrRollback is wrapped when the previous layout could not be restored after a
	// failure: the card's layout is then neither the old nor the new one.
	ErrRollback = errors.New("rollback failed")
)

// Card is one card in MIG mode whose layout the applier may change. It holds no
// state between calls beyond the handle: every call reads the card afresh. Calls on
// one card must not overlap (nor run beside another tool that changes its layout):
// the caller serialises them.
type Card struct {
	dev    nvml.Device
	uuid   string
	memMiB uint64
}

// Open checks that dev is a card in MIG mode and returns it.
func Open(dev nvml.Device) (*Card, error) {
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: GetUUID: %v", ErrNVML, ret)
	}
	mode, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: card %s: GetMigMode: %v", ErrNVML, uuid, ret)
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		return nil, fmt.Errorf("%w: card %s", ErrNotMIG, uuid)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS || mem.Total == 0 {
		return nil, fmt.Errorf("%w: card %s: GetMemoryInfo: %v", ErrNVML, uuid, ret)
	}
	return &Card{dev: dev, uuid: uuid, memMiB: mem.Total >> 20}, nil
}

// Table reads the card's profile table in the planner's terms.
func (c *Card) Table() (planner.Table, error) {
	l, err := readLayout(c.dev, c.memMiB)
	if err != nil {
		return planner.Table{}, fmt.Errorf("card %s: %w", c.uuid, err)
	}
	return l.table(), nil
}

// Geometry reads the card's current GPU instances, in start order.
func (c *Card) Geometry() (planner.Geometry, error) {
	l, err := readLayout(c.dev, c.memMiB)
	if err != nil {
		return nil, fmt.Errorf("card %s: %w", c.uuid, err)
	}
	return l.geometry(), nil
}

// Apply changes the card's layout to plan: GPU instances the plan does not name are
// destroyed (their compute instances first), missing ones are created at their
// placements with one compute instance spanning each, and the result is read back.
// A card with running processes is refused (ErrBusy) before anything changes. On any
// failure the steps taken are undone in reverse order and the error says whether the
// previous layout came back; recreated instances get new MIG UUIDs, as NVML gives.
func (c *Card) Apply(plan planner.Geometry) error {
	before, err := readLayout(c.dev, c.memMiB)
	if err != nil {
		return fmt.Errorf("card %s: %w", c.uuid, err)
	}
	if err := before.table().Validate(plan); err != nil {
		return fmt.Errorf("card %s: plan %v: %w", c.uuid, plan, err)
	}
	if err := c.checkIdle(); err != nil {
		return err
	}
	klog.InfoS("Applying MIG layout", "uuid", c.uuid, "from", before.geometry().String(), "to", plan.String())
	var undo []func() error
	if err := c.change(before, plan, &undo); err != nil {
		return c.rollback(before, plan, undo, err)
	}
	after, err := readLayout(c.dev, c.memMiB)
	if err == nil {
		err = verify(after, plan)
	}
	if err != nil {
		return c.rollback(before, plan, undo, err)
	}
	klog.InfoS("Applied MIG layout", "uuid", c.uuid, "layout", plan.String())
	return nil
}

// change carries the plan out, recording how to undo each step.
func (c *Card) change(before layout, plan planner.Geometry, undo *[]func() error) error {
	for _, gi := range before.gis {
		if !slices.Contains(plan, gi.Instance) {
			if err := destroyGI(c.dev, gi, undo); err != nil {
				return err
			}
		} else if len(gi.cis) == 0 {
			if err := createFullCI(gi.handle, gi.profile.Info.SliceCount, gi.Instance, undo); err != nil {
				return err
			}
		}
	}
	current := before.geometry()
	for _, in := range plan {
		if slices.Contains(current, in) {
			continue
		}
		p, _ := before.profile(in.Profile)
		gi, err := createGI(c.dev, p.Info, in, p.Placements[0].Size, undo)
		if err != nil {
			return err
		}
		if err := createFullCI(gi, p.Info.SliceCount, in, undo); err != nil {
			return err
		}
	}
	return nil
}

// destroyGI destroys a GPU instance's compute instances, then the instance. Its undo
// rebuilds what was destroyed: the compute instances alone when the GPU instance
// survived, or the GPU instance at its placement with all of them.
func destroyGI(dev nvml.Device, gi liveGI, undo *[]func() error) error {
	var gone []nvml.ComputeInstanceProfileInfo
	rebuildCIs := func(h nvml.GpuInstance) error {
		for _, info := range gone {
			if _, ret := h.CreateComputeInstance(&info); ret != nvml.SUCCESS {
				return fmt.Errorf("%w: %s: CreateComputeInstance: %v", ErrNVML, gi.Instance, ret)
			}
		}
		return nil
	}
	for k, ci := range gi.cis {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			*undo = append(*undo, func() error { return rebuildCIs(gi.handle) })
			return fmt.Errorf("%w: %s: ComputeInstance.Destroy: %v", ErrNVML, gi.Instance, ret)
		}
		gone = append(gone, gi.ciProfiles[k])
	}
	if ret := gi.handle.Destroy(); ret != nvml.SUCCESS {
		*undo = append(*undo, func() error { return rebuildCIs(gi.handle) })
		return fmt.Errorf("%w: %s: GpuInstance.Destroy: %v", ErrNVML, gi.Instance, ret)
	}
	*undo = append(*undo, func() error {
		pl := nvml.GpuInstancePlacement{Start: uint32(gi.Start), Size: gi.size}
		h, ret := dev.CreateGpuInstanceWithPlacement(&gi.profile.Info, &pl)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("%w: recreate %s: %v", ErrNVML, gi.Instance, ret)
		}
		return rebuildCIs(h)
	})
	return nil
}

func createGI(dev nvml.Device, info nvml.GpuInstanceProfileInfo, in planner.Instance, size uint32, undo *[]func() error) (nvml.GpuInstance, error) {
	pl := nvml.GpuInstancePlacement{Start: uint32(in.Start), Size: size}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: create %s: CreateGpuInstanceWithPlacement: %v", ErrNVML, in, ret)
	}
	*undo = append(*undo, func() error {
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("%w: remove %s: GpuInstance.Destroy: %v", ErrNVML, in, ret)
		}
		return nil
	})
	return gi, nil
}

func createFullCI(gi nvml.GpuInstance, slices uint32, in planner.Instance, undo *[]func() error) error {
	info, err := fullComputeProfile(gi, slices)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	ci, ret := gi.CreateComputeInstance(&info)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("%w: %s: CreateComputeInstance: %v", ErrNVML, in, ret)
	}
	*undo = append(*undo, func() error {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("%w: %s: ComputeInstance.Destroy: %v", ErrNVML, in, ret)
		}
		return nil
	})
	return nil
}

// verify checks that the card holds exactly the plan, each GPU instance with a
// compute instance.
func verify(l layout, plan planner.Geometry) error {
	want := append(planner.Geometry(nil), plan...)
	sort.Slice(want, func(i, j int) bool { return want[i].Start < want[j].Start })
	if got := l.geometry(); !slices.Equal(got, want) {
		return fmt.Errorf("%w: read %v, planned %v", ErrVerify, got, want)
	}
	for _, gi := range l.gis {
		if len(gi.cis) == 0 {
			return fmt.Errorf("%w: %s has no compute instance", ErrVerify, gi.Instance)
		}
	}
	return nil
}

// rollback undoes the steps taken, newest first, and checks that the card is back
// to its layout before Apply.
func (c *Card) rollback(before layout, plan planner.Geometry, undo []func() error, cause error) error {
	klog.ErrorS(cause, "Applying MIG layout failed; restoring the previous layout", "uuid", c.uuid,
		"plan", plan.String(), "previous", before.geometry().String(), "steps", len(undo))
	var failures []error
	for k := len(undo) - 1; k >= 0; k-- {
		if err := undo[k](); err != nil {
			failures = append(failures, err)
		}
	}
	if len(failures) == 0 {
		after, err := readLayout(c.dev, c.memMiB)
		if err != nil {
			failures = append(failures, err)
		} else if err := sameLayout(after, before); err != nil {
			failures = append(failures, err)
		}
	}
	if len(failures) > 0 {
		err := fmt.Errorf("%w on card %s after %w: %w", ErrRollback, c.uuid, cause, errors.Join(failures...))
		klog.ErrorS(err, "The card's MIG layout is neither the previous nor the planned one", "uuid", c.uuid)
		return err
	}
	klog.InfoS("Restored the previous MIG layout", "uuid", c.uuid, "layout", before.geometry().String())
	return fmt.Errorf("card %s: applying %v failed, previous layout %v restored: %w", c.uuid, plan, before.geometry(), cause)
}

// sameLayout compares GPU instances and the profiles of their compute instances.
func sameLayout(got, want layout) error {
	if !slices.Equal(got.geometry(), want.geometry()) {
		return fmt.Errorf("layout is %v, was %v", got.geometry(), want.geometry())
	}
	for k := range got.gis {
		g, w := ciIDs(got.gis[k]), ciIDs(want.gis[k])
		if !slices.Equal(g, w) {
			return fmt.Errorf("%s: compute instance profiles %v, were %v", got.gis[k].Instance, g, w)
		}
	}
	return nil
}

func ciIDs(gi liveGI) []uint32 {
	out := make([]uint32, len(gi.ciProfiles))
	for i, p := range gi.ciProfiles {
		out[i] = p.Id
	}
	return out
}

// checkIdle refuses a card on which NVML lists a process, on the card itself or on
// any of its MIG devices.
func (c *Card) checkIdle() error {
	var where []string
	var pids []uint32
	collect := func(d nvml.Device, name string) error {
		for _, get := range []func() ([]nvml.ProcessInfo, nvml.Return){d.GetComputeRunningProcesses, d.GetGraphicsRunningProcesses} {
			procs, ret := get()
			if ret == nvml.ERROR_NOT_SUPPORTED {
				continue
			}
			if ret != nvml.SUCCESS {
				return fmt.Errorf("%w: card %s: cannot list the processes on %s: %v", ErrNVML, c.uuid, name, ret)
			}
			for _, p := range procs {
				pids = append(pids, p.Pid)
				where = append(where, name)
			}
		}
		return nil
	}
	if err := collect(c.dev, c.uuid); err != nil {
		return err
	}
	n, ret := c.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("%w: card %s: GetMaxMigDeviceCount: %v", ErrNVML, c.uuid, ret)
	}
	for i := 0; i < n; i++ {
		md, ret := c.dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("%w: card %s: GetMigDeviceHandleByIndex(%d): %v", ErrNVML, c.uuid, i, ret)
		}
		name, ret := md.GetUUID()
		if ret != nvml.SUCCESS {
			name = fmt.Sprintf("MIG device %d", i)
		}
		if err := collect(md, name); err != nil {
			return err
		}
	}
	if len(pids) > 0 {
		return fmt.Errorf("%w: card %s: %d processes run (pids %v on %v); stop them before changing its MIG layout",
			ErrBusy, c.uuid, len(pids), pids, slices.Compact(where))
	}
	return nil
}
