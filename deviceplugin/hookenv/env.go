// Package hookenv renders what vgpu-core reads in a container: the environment, the
// mounts and the limits file of the Allocate response (docs/contract.md has the table).
package hookenv

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// Container is what every container gets, whatever its cards.
type Container struct {
	// HookLibrary is the host path of libvgpu.so; it is mounted read-only at the same path.
	HookLibrary string
	// PreloadHostFile is the host file holding the library path, for config.PreloadFile.
	PreloadHostFile string
	Preload         string
	// Dir is ignored: a container always finds its two files under config.ContainerPath,
	// the only place vgpu-core reads its limits from (config validation refuses any other
	// containerDir). Deprecated: leave it empty.
	Dir      string
	LogLevel string
	// Handoff is config.HandoffEnv, HandoffCDI or HandoffBoth; empty means env.
	Handoff string
	// CardKind is the CDI kind that names the cards by UUID (nvidia.com/gpu).
	CardKind string
	// ContextReserveMiB is a card's CUDA context footprint (config.ContextReserve for its
	// model); nil or 0 counts none.
	ContextReserveMiB func(uuid string) int64
}

// VoidDevices is NVIDIA_VISIBLE_DEVICES in cdi mode: it tells an NVIDIA container
// runtime in legacy mode to add no cards, even when the image sets the variable (CUDA
// images set it to "all"); the cards come from CDI only.
const VoidDevices = "void"

// limitValues are the vgpu-core keys of one container, in the order they are written.
func (c *Container) limitValues(rec *records.Record) [][2]string {
	uuids := make([]string, len(rec.Cards))
	mem := make([]string, len(rec.Cards))
	sm := make([]string, len(rec.Cards))
	for i, card := range rec.Cards {
		uuids[i] = VisibleUUID(card)
		mem[i] = strconv.FormatInt(card.MemoryMiB, 10)
		sm[i] = strconv.Itoa(SMLimit(card.Cores))
	}
	kv := [][2]string{
		{api.EnvVisibleUUIDs, strings.Join(uuids, ",")},
		{api.EnvMemoryLimitMiB, strings.Join(mem, ",")},
		{api.EnvSMLimit, strings.Join(sm, ",")},
		{api.EnvQoS, string(rec.QoS)},
		{api.EnvSharedRegion, api.RegionPathIn(rec.RegionVolume, rec.Container)},
		{api.EnvLogLevel, c.LogLevel},
	}
	if r := c.contextReserve(rec); r > 0 {
		kv = append(kv, [2]string{api.EnvContextReserveMiB, strconv.FormatInt(r, 10)})
	}
	return kv
}

// VisibleUUID is the device a card assignment shows the container: the MIG device for
// a whole MIG instance, else the card. It is what the container runtime is told to add
// and what vgpu-core matches against each CUDA device's UUID (cuDeviceGetUuid_v2 gives
// a MIG device's own UUID, as NVML does on a MIG device handle).
func VisibleUUID(c api.CardAssignment) string {
	if c.IsMIG() {
		return c.MIG
	}
	return c.UUID
}

// contextReserve is the container's context footprint: vgpu-core takes one figure, so the
// largest of its cards'.
func (c *Container) contextReserve(rec *records.Record) int64 {
	if c.ContextReserveMiB == nil {
		return 0
	}
	var r int64
	for _, card := range rec.Cards {
		r = max(r, c.ContextReserveMiB(card.UUID))
	}
	return r
}

// LimitsPath is where a container finds its limits file (vgpu-core's fixed path). Its
// region's path is in that file: on the pod's region volume or in its /dev/shm
// (api.RegionPathIn).
const LimitsPath = config.ContainerPath + "/" + records.LimitsFileName

// SMLimit turns an assignment's cores into vgpu-core's SM limit: 0 cores (no compute
// reserved, as Volcano writes for memory-only requests) runs uncapped, like 100.
func SMLimit(cores int) int {
	if cores <= 0 || cores > 100 {
		return 100
	}
	return cores
}

// LimitsFile renders the KEY=VALUE file vgpu-core reads over its environment.
func (c *Container) LimitsFile(rec *records.Record) string {
	var b strings.Builder
	b.WriteString("version=1\n")
	for _, kv := range c.limitValues(rec) {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	return b.String()
}

// Response is the kubelet's answer for one container: visible cards (as the environment,
// CDI devices or both, by Handoff), the vgpu-core environment, the hook library and the
// container's limits file from hostDir (its records.Store directory), mounted alone and
// read-only at LimitsPath. Nothing the container can write is mounted from the host: its
// region lives in its own pod (api.RegionVolumeName).
func (c *Container) Response(rec *records.Record, hostDir string) *pluginapi.ContainerAllocateResponse {
	env := map[string]string{
		// Cards are listed in PCI bus order; this makes CUDA ordinals follow it too.
		"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		api.EnvLimitsFile:   LimitsPath,
	}
	for _, kv := range c.limitValues(rec) {
		env[kv[0]] = kv[1]
	}
	mounts := ContainerMounts(hostDir)
	resp := &pluginapi.ContainerAllocateResponse{
		Envs: env,
		Annotations: map[string]string{
			api.Prefix + "container": rec.Namespace + "/" + rec.Pod + "/" + rec.Container,
		},
	}
	if c.Handoff == config.HandoffCDI {
		env["NVIDIA_VISIBLE_DEVICES"] = VoidDevices
		resp.CdiDevices = append(c.cardDevices(rec), &pluginapi.CDIDevice{Name: cdi.QualifiedName(cdi.HookKind, cdi.HookDevice)})
		resp.Mounts = mounts
		return resp
	}
	env["NVIDIA_VISIBLE_DEVICES"] = env[api.EnvVisibleUUIDs]
	lib := &pluginapi.Mount{ContainerPath: c.HookLibrary, HostPath: c.HookLibrary, ReadOnly: true}
	mounts = append([]*pluginapi.Mount{lib}, mounts...)
	switch c.Preload {
	case config.PreloadEnv:
		env["LD_PRELOAD"] = c.HookLibrary
	default:
		mounts = append(mounts, &pluginapi.Mount{ContainerPath: preloadPath, HostPath: c.PreloadHostFile, ReadOnly: true})
	}
	resp.Mounts = mounts
	if c.Handoff == config.HandoffBoth {
		resp.CdiDevices = c.cardDevices(rec)
	}
	return resp
}

// ContainerMounts is the one mount of a container's files from its host directory: the
// limits file, alone and read-only.
func ContainerMounts(hostDir string) []*pluginapi.Mount {
	return []*pluginapi.Mount{
		{ContainerPath: LimitsPath, HostPath: filepath.Join(hostDir, records.LimitsFileName), ReadOnly: true},
	}
}

// preloadPath is the dynamic loader's preload list.
const preloadPath = "/etc/ld.so.preload"

// cardDevices names the container's cards (or MIG devices) as CDI devices, in CUDA
// ordinal order.
func (c *Container) cardDevices(rec *records.Record) []*pluginapi.CDIDevice {
	out := make([]*pluginapi.CDIDevice, len(rec.Cards))
	for i, card := range rec.Cards {
		// The NVIDIA toolkit's uuid naming names a MIG device by its own UUID.
		out[i] = &pluginapi.CDIDevice{Name: cdi.QualifiedName(c.CardKind, VisibleUUID(card))}
	}
	return out
}

// HookSpec is the agent's CDI spec: one device, tessera.io/vgpu=hook, that mounts the
// hook library and preloads it (the ld.so.preload file, or LD_PRELOAD with preload: env).
// What differs per container (its directory, its limits) stays in the Allocate response.
func (c *Container) HookSpec() *specs.Spec {
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	edits := specs.ContainerEdits{Mounts: []*specs.Mount{{HostPath: c.HookLibrary, ContainerPath: c.HookLibrary, Type: "bind", Options: ro}}}
	switch c.Preload {
	case config.PreloadEnv:
		edits.Env = []string{"LD_PRELOAD=" + c.HookLibrary}
	default:
		edits.Mounts = append(edits.Mounts, &specs.Mount{HostPath: c.PreloadHostFile, ContainerPath: preloadPath, Type: "bind", Options: ro})
	}
	return &specs.Spec{Version: cdi.Version, Kind: cdi.HookKind, Devices: []specs.Device{{Name: cdi.HookDevice, ContainerEdits: edits}}}
}
