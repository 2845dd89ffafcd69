package nvmlfake

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// MIGProfile is one GPU-instance profile of a card model, as NVML describes it.
//
// Placement follows NVML: a card has 8 memory slices; a GPU instance occupies Size
// of them from a legal Start. Compute slices (Slices, the "Ng" of the name) are what
// NVML reports as SliceCount.
type MIGProfile struct {
	// ID is NVML's profile ID (nvml.GPU_INSTANCE_PROFILE_*).
	ID int
	// Name is what nvidia-smi prints without the "MIG " prefix, e.g. "1g.10gb".
	Name      string
	Slices    int
	Size      int
	Starts    []int
	Instances int
	MemoryMiB uint64
	SMs       uint32
	// Media is set on the "+me" profile, which owns the card's media engines.
	Media bool
}

// MIGModel is a card model that supports MIG.
type MIGModel struct {
	// Name is what NVML's GetName returns for the whole card.
	Name      string
	MemoryMiB uint64
	SMs       uint32
	Profiles  []MIGProfile
}

// Profile returns the profile with NVML ID id.
func (m MIGModel) Profile(id int) (MIGProfile, bool) {
	for _, p := range m.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileByName returns the profile named name (e.g. "3g.40gb").
func (m MIGModel) ProfileByName(name string) (MIGProfile, bool) {
	for _, p := range m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// Sources of the tables below, and how sure each number is.
//
// Profile names, instance counts and fractions: NVIDIA's MIG user guide, "Supported
// MIG Profiles" (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html),
// which lists for A100-SXM4-40GB 1g.5gb (1/8 memory, 1/7 SMs, 7 instances),
// 1g.5gb+me (1 instance), 1g.10gb (4), 2g.10gb (3), 3g.20gb (4/8 memory, 3/7 SMs,
// 2), 4g.20gb (1), 7g.40gb (1), and says that A100-SXM4-80GB uses the same shapes
// named 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb. The guide's
// "Supported GPUs" page lists H100-SXM5 80GB and B200 180GB with 7 instances at most.
//
// Placement starts and sizes in memory slices (1g: 0..6 size 1; 1g double-memory:
// 0,2,4,6 size 2; 2g: 0,2,4 size 2; 3g: 0,4 size 4; 4g: 0 size 4; 7g: 0 size 8):
// go-nvml v0.13.0-1's mock/dgxa100 (MIGPlacements), which matches the placement
// diagram of the guide for A100. We use the same grid for A100-80GB, H100 and B200;
// the guide draws the same diagram for them, but we could not read its placement
// figure as text, so for those three the grid is unconfirmed.
//
// Memory (MiB) and SM counts: A100-SXM4-40GB from go-nvml's mock/dgxa100 (14 SMs per
// compute slice, 98 for 7g). The others are unconfirmed: A100-80GB and H100 memory
// figures are nvidia-smi's "mig -lgip" sizes as we remember them (9.5/19.5/39.25/79.25
// GiB on A100-80GB; H100 alike), H100 SMs 16 per 1g (26 on 1g.20gb), 32, 60, 64, 132;
// B200 SM figures (18 SMs per slice, 126 for 7g) follow go-nvml's later
// mock/shared/gpus/b200.go, which we could not check against NVIDIA's guide; its
// memory sizes are ours, chosen just under 1/8, 2/8, 4/8 and 8/8 of the card as
// on the other cards, so that the names come out as NVIDIA's (1g.23gb ... 7g.180gb).

// placementGrid returns the starts and size of a profile on the 8-slice grid.
func placementGrid(id int) (starts []int, size int) {
	switch id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:
		return []int{0, 1, 2, 3, 4, 5, 6}, 1
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2:
		return []int{0, 2, 4, 6}, 2
	case nvml.GPU_INSTANCE_PROFILE_2_SLICE:
		return []int{0, 2, 4}, 2
	case nvml.GPU_INSTANCE_PROFILE_3_SLICE:
		return []int{0, 4}, 4
	case nvml.GPU_INSTANCE_PROFILE_4_SLICE:
		return []int{0}, 4
	case nvml.GPU_INSTANCE_PROFILE_7_SLICE:
		return []int{0}, 8
	}
	return nil, 0
}

// sevenSlice is one row of a 7-compute-slice card's table.
type sevenSlice struct {
	id        int
	name      string
	slices    int
	instances int
	memoryMiB uint64
	sms       uint32
	media     bool
}

func sevenSliceModel(name string, memMiB uint64, sms uint32, rows []sevenSlice) MIGModel {
	m := MIGModel{Name: name, MemoryMiB: memMiB, SMs: sms}
	for _, r := range rows {
		starts, size := placementGrid(r.id)
		m.Profiles = append(m.Profiles, MIGProfile{ID: r.id, Name: r.name, Slices: r.slices, Size: size,
			Starts: starts, Instances: r.instances, MemoryMiB: r.memoryMiB, SMs: r.sms, Media: r.media})
	}
	return m
}

// A100SXM4x40GB is NVIDIA A100-SXM4-40GB (108 SMs, 98 of them usable under MIG).
func A100SXM4x40GB() MIGModel {
	return sevenSliceModel("NVIDIA A100-SXM4-40GB", 40960, 108, []sevenSlice{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.5gb", 1, 7, 4864, 14, false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, "1g.5gb+me", 1, 1, 4864, 14, true},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "1g.10gb", 1, 4, 9856, 14, false},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, "2g.10gb", 2, 3, 9856, 28, false},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.20gb", 3, 2, 19968, 42, false},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, "4g.20gb", 4, 1, 19968, 56, false},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.40gb", 7, 1, 40192, 98, false},
	})
}

// A100SXM4x80GB is NVIDIA A100-SXM4-80GB. Memory sizes unconfirmed (see above).
func A100SXM4x80GB() MIGModel {
	return sevenSliceModel("NVIDIA A100-SXM4-80GB", 81920, 108, []sevenSlice{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb", 1, 7, 9728, 14, false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, "1g.10gb+me", 1, 1, 9728, 14, true},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "1g.20gb", 1, 4, 19968, 14, false},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, "2g.20gb", 2, 3, 19968, 28, false},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.40gb", 3, 2, 40192, 42, false},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, "4g.40gb", 4, 1, 40192, 56, false},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.80gb", 7, 1, 81152, 98, false},
	})
}

// H100SXM5x80GB is NVIDIA H100 80GB HBM3 (132 SMs). Memory and SM counts unconfirmed.
func H100SXM5x80GB() MIGModel {
	return sevenSliceModel("NVIDIA H100 80GB HBM3", 81559, 132, []sevenSlice{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb", 1, 7, 9984, 16, false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, "1g.10gb+me", 1, 1, 9984, 16, true},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "1g.20gb", 1, 4, 20096, 26, false},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, "2g.20gb", 2, 3, 20096, 32, false},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.40gb", 3, 2, 40448, 60, false},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, "4g.40gb", 4, 1, 40448, 64, false},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.80gb", 7, 1, 81152, 132, false},
	})
}

// B200 is NVIDIA B200 (Blackwell, 180 GB). Memory and SM counts unconfirmed.
func B200() MIGModel {
	return sevenSliceModel("NVIDIA B200", 184320, 148, []sevenSlice{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.23gb", 1, 7, 22784, 18, false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, "1g.23gb+me", 1, 1, 22784, 18, true},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "1g.45gb", 1, 4, 45568, 18, false},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, "2g.45gb", 2, 3, 45568, 36, false},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.90gb", 3, 2, 91392, 54, false},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, "4g.90gb", 4, 1, 91392, 72, false},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.180gb", 7, 1, 182528, 126, false},
	})
}

// computeProfileID maps a compute instance's slice count to NVML's CI profile ID.
func computeProfileID(slices int) (int, bool) {
	switch slices {
	case 1:
		return nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, true
	case 2:
		return nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, true
	case 3:
		return nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, true
	case 4:
		return nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, true
	case 7:
		return nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, true
	}
	return 0, false
}

// computeSlices lists the compute-instance sizes a GPU instance of n compute slices
// offers (7g: 1,2,3,4,7; 4g: 1,2,4; 3g: 1,2,3; 2g: 1,2; 1g: 1), as go-nvml's
// mock/dgxa100 lists them.
func computeSlices(n int) []int {
	switch n {
	case 7:
		return []int{1, 2, 3, 4, 7}
	case 4:
		return []int{1, 2, 4}
	case 3:
		return []int{1, 2, 3}
	case 2:
		return []int{1, 2}
	}
	return []int{1}
}
