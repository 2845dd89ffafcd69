package nvmlfake

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func mustGI(t *testing.T, d nvml.Device, id, start int) nvml.GpuInstance {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(id)
	if ret != nvml.SUCCESS {
		t.Fatalf("profile %d: %v", id, ret)
	}
	pl := nvml.GpuInstancePlacement{Start: uint32(start), Size: 0}
	places, _ := d.GetGpuInstancePossiblePlacements(&info)
	for _, p := range places {
		if int(p.Start) == start {
			pl = p
		}
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &pl)
	if ret != nvml.SUCCESS {
		t.Fatalf("create profile %d at %d: %v", id, start, ret)
	}
	return gi
}

func fullCI(t *testing.T, gi nvml.GpuInstance, slices int) nvml.ComputeInstance {
	t.Helper()
	id, _ := computeProfileID(slices)
	info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatalf("CI profile: %v", ret)
	}
	ci, ret := gi.CreateComputeInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatalf("create CI: %v", ret)
	}
	return ci
}

// Every table keeps to the 8-slice grid: each legal placement lies on the card, and
// the count of a profile never exceeds what its placements allow.
func TestEveryMIGTableKeepsToTheGrid(t *testing.T) {
	for _, model := range []MIGModel{A100SXM4x40GB(), A100SXM4x80GB(), H100SXM5x80GB(), B200()} {
		for _, p := range model.Profiles {
			if p.Instances > len(p.Starts) && !p.Media {
				t.Errorf("%s %s: %d instances but %d placements", model.Name, p.Name, p.Instances, len(p.Starts))
			}
			for _, s := range p.Starts {
				if s < 0 || s+p.Size > 8 {
					t.Errorf("%s %s: placement %d+%d leaves the card", model.Name, p.Name, s, p.Size)
				}
			}
			if p.MemoryMiB == 0 || p.MemoryMiB > model.MemoryMiB || p.SMs == 0 || p.SMs > model.SMs {
				t.Errorf("%s %s: memory %d MiB, %d SMs do not fit the card", model.Name, p.Name, p.MemoryMiB, p.SMs)
			}
		}
	}
}

func TestGPUInstancesFollowNVMLPlacementRules(t *testing.T) {
	m := MIGCards(A100SXM4x40GB())
	d := m.Devices[0]
	three := mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_2_SLICE)
	for _, tc := range []struct {
		name  string
		start uint32
		size  uint32
		want  nvml.Return
	}{
		{"an overlap with the 3g instance is refused", 4, 2, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"a start the profile does not allow is invalid", 1, 2, nvml.ERROR_INVALID_ARGUMENT},
		{"a wrong size is invalid", 0, 4, nvml.ERROR_INVALID_ARGUMENT},
		{"a free legal placement is created", 2, 2, nvml.SUCCESS},
	} {
		_, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: tc.start, Size: tc.size})
		if ret != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, ret, tc.want)
		}
	}
	// A 4g instance needs slices 0-3, where the 2g instance now sits.
	four, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_4_SLICE)
	if _, ret := d.CreateGpuInstance(&four); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("4g on a card with 2g at 2: got %v", ret)
	}
	gis, _ := d.GetGpuInstances(&nvml.GpuInstanceProfileInfo{Id: nvml.GPU_INSTANCE_PROFILE_3_SLICE})
	if len(gis) != 1 || gis[0] != three {
		t.Errorf("GetGpuInstances(3g) = %v", gis)
	}
}

func TestInstanceCountsAndMediaProfile(t *testing.T) {
	m := MIGCards(H100SXM5x80GB())
	d := m.Devices[0]
	mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 0)
	me, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
	if _, ret := d.CreateGpuInstanceWithPlacement(&me, &nvml.GpuInstancePlacement{Start: 1, Size: 1}); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Fatalf("second +me instance: got %v", ret)
	}
	for s := 1; s < 7; s++ {
		mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE, s)
	}
	one, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstance(&one); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Fatalf("an eighth 1g instance: got %v", ret)
	}
}

func TestMIGDevicesDescribeTheirInstance(t *testing.T) {
	m := MIGCards(A100SXM4x80GB())
	d := m.Devices[0]
	gi := mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0)
	fullCI(t, gi, 3)
	if n, _ := d.GetMaxMigDeviceCount(); n != 7 {
		t.Errorf("max MIG devices %d", n)
	}
	md, ret := d.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(1); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("index 1: %v", ret)
	}
	uuid, _ := md.GetUUID()
	mem, _ := md.GetMemoryInfo()
	attrs, _ := md.GetAttributes()
	giID, _ := md.GetGpuInstanceId()
	ciID, _ := md.GetComputeInstanceId()
	parent, _ := md.GetDeviceHandleFromMigDeviceHandle()
	if !strings.HasPrefix(uuid, "MIG-") || mem.Total != 40192<<20 || attrs.MultiprocessorCount != 42 || giID != 1 || ciID != 0 || parent != nvml.Device(d) {
		t.Errorf("MIG device: uuid %q memory %d SMs %d gi %d ci %d", uuid, mem.Total>>20, attrs.MultiprocessorCount, giID, ciID)
	}
}

func TestInUseInstancesAndCardsAreRefused(t *testing.T) {
	m := MIGCards(A100SXM4x40GB())
	d := m.Devices[0]
	gi := mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0)
	ci := fullCI(t, gi, 7)
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a GI with a CI: got %v, want ERROR_IN_USE", ret)
	}
	uuid := m.MIGInstances(0)[0].UUID
	m.SetMIGProcesses(uuid, []nvml.ProcessInfo{{Pid: 42}})
	if ret := ci.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a busy CI: got %v", ret)
	}
	if ret, act := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.SUCCESS || act != nvml.ERROR_IN_USE {
		t.Errorf("disabling MIG on a busy card: %v/%v", ret, act)
	}
	if cur, pending, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || pending != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("mode %d pending %d, want enabled with disable pending", cur, pending)
	}
	if m.ResetCard(0) {
		t.Error("a busy card was reset")
	}
	m.SetMIGProcesses(uuid, nil)
	if ci.Destroy() != nvml.SUCCESS || gi.Destroy() != nvml.SUCCESS || !m.ResetCard(0) {
		t.Fatal("an idle card could not be emptied and reset")
	}
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("after reset the mode is %d", cur)
	}
}

func TestInjectedFaultFiresOnceOnTheChosenCall(t *testing.T) {
	m := MIGCards(A100SXM4x40GB())
	d := m.Devices[0]
	m.InjectMIGFault(0, MIGFault{Op: OpCreateGpuInstance, Skip: 1, Ret: nvml.ERROR_UNKNOWN})
	mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0)
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 1, Size: 1}); ret != nvml.ERROR_UNKNOWN {
		t.Fatalf("second create: got %v, want the injected ERROR_UNKNOWN", ret)
	}
	mustGI(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1)
	if n := m.MIGGPUInstances(0); n != 2 {
		t.Fatalf("%d GPU instances, want 2", n)
	}
}

// The helpers that lay out a card for other packages' tests go through the card's own
// NVML calls: what they create is what NVML lists, and NVML's rules still apply.
func TestCreateAndDestroyMIGDevicesByProfileName(t *testing.T) {
	m := MIGCards(H100SXM5x80GB())
	big, err := m.CreateMIGDevice(0, "3g.40gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	small, err := m.CreateMIGDevice(0, "1g.10gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateMIGDevice(0, "3g.40gb", 4); err == nil || !strings.Contains(err.Error(), "ERROR_INSUFFICIENT_RESOURCES") {
		t.Errorf("a second 3g.40gb on the same slices: err = %v, want NVML's insufficient resources", err)
	}
	if _, err := m.CreateMIGDevice(0, "9g.99gb", 0); err == nil || !strings.Contains(err.Error(), `no MIG profile "9g.99gb"`) {
		t.Errorf("an unknown profile: err = %v", err)
	}
	got := m.MIGInstances(0)
	if len(got) != 2 || got[0].UUID != big || got[1].UUID != small || got[0].Profile != "3g.40gb" || got[1].Start != 0 {
		t.Fatalf("instances %+v, want the 3g.40gb %s and the 1g.10gb %s", got, big, small)
	}
	if err := m.DestroyMIGDevice(big); err != nil {
		t.Fatal(err)
	}
	if got := m.MIGInstances(0); len(got) != 1 || got[0].UUID != small || m.MIGGPUInstances(0) != 1 {
		t.Fatalf("after destroying %s: %+v", big, got)
	}
	if err := m.DestroyMIGDevice(big); err == nil {
		t.Error("destroying a MIG device twice succeeded")
	}
}
