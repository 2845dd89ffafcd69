package discovery

import (
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// The names discovery derives from NVML's numbers are the names NVIDIA prints, on
// every card the fake models.
func TestMIGProfileNamesMatchNVIDIAs(t *testing.T) {
	models := []nvmlfake.MIGModel{nvmlfake.A100SXM4x40GB(), nvmlfake.A100SXM4x80GB(), nvmlfake.H100SXM5x80GB(), nvmlfake.B200()}
	m := nvmlfake.MIGCards(models...)
	for i, model := range models {
		profiles, err := MIGProfiles(m.Devices[i], model.MemoryMiB)
		if err != nil {
			t.Fatal(err)
		}
		if len(profiles) != len(model.Profiles) {
			t.Fatalf("%s: %d profiles, want %d", model.Name, len(profiles), len(model.Profiles))
		}
		for _, p := range profiles {
			want, ok := model.Profile(int(p.Info.Id))
			if !ok || p.Name != want.Name {
				t.Errorf("%s profile %d: named %q, want %q", model.Name, p.Info.Id, p.Name, want.Name)
			}
			if len(p.Placements) != len(want.Starts) {
				t.Errorf("%s %s: %d placements, want %d", model.Name, p.Name, len(p.Placements), len(want.Starts))
			}
		}
	}
}

func create(t *testing.T, d nvml.Device, id, start int) {
	t.Helper()
	info, _ := d.GetGpuInstanceProfileInfo(id)
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(placementSize(t, d, info))})
	if ret != nvml.SUCCESS {
		t.Fatalf("create profile %d at %d: %v", id, start, ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfileFor(int(info.SliceCount)), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
}

func placementSize(t *testing.T, d nvml.Device, info nvml.GpuInstanceProfileInfo) int {
	p, ret := d.GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS || len(p) == 0 {
		t.Fatalf("placements: %v", ret)
	}
	return int(p[0].Size)
}

func ciProfileFor(slices int) int {
	return map[int]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE}[slices]
}

func TestDiscoverListsMIGDevices(t *testing.T) {
	m := nvmlfake.MIGCards(nvmlfake.H100SXM5x80GB(), nvmlfake.A100SXM4x40GB())
	h100 := m.Devices[0]
	create(t, h100, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4)
	create(t, h100, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 0)
	create(t, h100, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 2)
	res, err := Discover(m, Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	card := res.Devices[0]
	want := []api.MIGInstance{
		{Profile: "3g.40gb", GI: 1, CI: 0, Start: 4, Size: 4, MemoryMiB: 40448, SMCount: 60},
		{Profile: "1g.20gb", GI: 2, CI: 0, Start: 0, Size: 2, MemoryMiB: 20096, SMCount: 26},
		{Profile: "1g.10gb+me", GI: 3, CI: 0, Start: 2, Size: 1, MemoryMiB: 9984, SMCount: 16},
	}
	if len(card.MIGDevices) != len(want) || !reflect.DeepEqual(card.Card.MIGInstances, instancesOf(card.MIGDevices)) {
		t.Fatalf("got %+v", card.MIGDevices)
	}
	for i, d := range card.MIGDevices {
		got := d.MIGInstance
		if !strings.HasPrefix(got.UUID, "MIG-") || d.ParentUUID != m.UUID(0) || d.Handle == nil {
			t.Errorf("device %d: uuid %q parent %q", i, got.UUID, d.ParentUUID)
		}
		got.UUID = ""
		if got != want[i] {
			t.Errorf("device %d: got %+v, want %+v", i, got, want[i])
		}
	}
	// A card in MIG mode with no instance says so with an empty list, not "unknown".
	if l := res.Devices[1].Card.MIGInstances; l == nil || len(l) != 0 {
		t.Errorf("an empty MIG card reads as %#v", l)
	}
	// And the inventory carries the layout beside the cards.
	if _, err := api.EncodeMIGInstances(inventoryOf(res).MIGInstances()); err != nil {
		t.Fatalf("the discovered layout does not encode: %v", err)
	}
}

func TestAMIGLayoutNVMLCannotReadLeavesTheCardInPlace(t *testing.T) {
	m := nvmlfake.NewMachine([]nvmlfake.CardSpec{{Name: "A100", MemoryMiB: 40960, MIG: true}})
	res, err := Discover(m, Options{Shares: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Devices[0]; !d.Card.MIG || d.Card.MIGInstances != nil || d.MIGDevices != nil {
		t.Fatalf("got %+v, want a MIG card with an unknown layout", d.Card)
	}
}

func instancesOf(ds []MIGDevice) []api.MIGInstance {
	out := make([]api.MIGInstance, len(ds))
	for i, d := range ds {
		out[i] = d.MIGInstance
	}
	return out
}

func inventoryOf(r *Result) *api.NodeInventory {
	return &api.NodeInventory{Version: api.InventoryVersion, Cards: r.Cards(), Links: r.Links}
}

// The kubelet admits a container only with a free slot of its card, and each MIG
// instance goes to one container: a card in MIG mode offers, from the start, a slot for
// every instance its profile table allows on one card (7 on the H100 and A100, 4 on a
// four-slice card), whatever it holds now; every other card, MIG-capable or not,
// offers exactly the configured shares.
func TestAMIGCardOffersASlotForEveryInstanceItsProfilesAllow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shares int
		want   []int // H100 with 3 instances, empty A100, empty 4-slice card, MIG-capable card out of MIG mode, plain card
	}{
		{"one share per card grows to each model's most instances", 1, []int{7, 7, 4, 1, 1}},
		{"shares between the two maxima grow only the larger tables", 5, []int{7, 7, 5, 5, 5}},
		{"more shares than any table allows stay as configured", 10, []int{10, 10, 10, 10, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a100 := nvmlfake.A100SXM4x40GB()
			specs := []nvmlfake.CardSpec{}
			for _, model := range []nvmlfake.MIGModel{nvmlfake.H100SXM5x80GB(), a100, fourSliceModel()} {
				specs = append(specs, nvmlfake.CardSpec{Name: model.Name, MemoryMiB: model.MemoryMiB, SMs: model.SMs, MIG: true, MIGModel: &model})
			}
			specs = append(specs, nvmlfake.CardSpec{Name: a100.Name, MemoryMiB: a100.MemoryMiB, SMs: a100.SMs, MIGModel: &a100},
				nvmlfake.CardSpec{Name: "NVIDIA L40S", MemoryMiB: 46068, SMs: 142})
			m := nvmlfake.NewMachine(specs)
			for _, in := range []struct {
				profile string
				start   int
			}{{"3g.40gb", 4}, {"1g.20gb", 0}, {"1g.10gb", 2}} {
				if _, err := m.CreateMIGDevice(0, in.profile, in.start); err != nil {
					t.Fatal(err)
				}
			}
			res, err := Discover(m, Options{Shares: tc.shares})
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, d := range res.Devices {
				got = append(got, d.Card.Shares)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("slots per card: %v, want %v", got, tc.want)
			}
			if n := len(res.Devices[0].Card.MIGInstances); n != 3 {
				t.Fatalf("the H100 lists %d instances, want the 3 created", n)
			}
		})
	}
}

// fourSliceModel is a made-up card whose profile table allows at most 4 instances
// (four 1g, two 2g or one 4g), so that the slot count is seen to follow the table.
func fourSliceModel() nvmlfake.MIGModel {
	return nvmlfake.MIGModel{Name: "Four-slice test card", MemoryMiB: 24576, SMs: 56, Profiles: []nvmlfake.MIGProfile{
		{ID: nvml.GPU_INSTANCE_PROFILE_1_SLICE, Name: "1g.6gb", Slices: 1, Size: 1, Starts: []int{0, 1, 2, 3}, Instances: 4, MemoryMiB: 5888, SMs: 14},
		{ID: nvml.GPU_INSTANCE_PROFILE_2_SLICE, Name: "2g.12gb", Slices: 2, Size: 2, Starts: []int{0, 2}, Instances: 2, MemoryMiB: 11904, SMs: 28},
		{ID: nvml.GPU_INSTANCE_PROFILE_4_SLICE, Name: "4g.24gb", Slices: 4, Size: 4, Starts: []int{0}, Instances: 1, MemoryMiB: 24192, SMs: 56},
	}}
}
