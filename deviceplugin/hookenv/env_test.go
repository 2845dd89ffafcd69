package hookenv

import (
	"reflect"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

const (
	lib          = "/usr/local/tessera/lib/libvgpu.so"
	limits       = "/var/run/tessera/limits.env"
	shmRegion    = "/dev/shm/tessera-main.region"
	volumeRegion = "/var/run/tessera-region/tessera-main.region"
)

func container(handoff, preload string) *Container {
	return &Container{HookLibrary: lib, PreloadHostFile: "/var/lib/tessera/ld.so.preload", Preload: preload,
		Dir: "/var/run/tessera", LogLevel: "warn", Handoff: handoff, CardKind: "nvidia.com/gpu"}
}

func record() *records.Record {
	return &records.Record{Namespace: "ns", Pod: "p", UID: "u", Container: "main", QoS: api.QoSFixedShare,
		Cards: []api.CardAssignment{{UUID: "GPU-b", MemoryMiB: 4096, Cores: 30}, {UUID: "GPU-d", MemoryMiB: 4096, Cores: 30}}}
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}

func mountPaths(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, m := range r.Mounts {
		out = append(out, m.ContainerPath)
	}
	return out
}

// Each handoff mode hands the cards and the hook library over its own path, never both
// over one: a mount given twice (kubelet and CDI) would collide in the runtime.
func TestResponseHandsCardsAndHookOverTheModesPath(t *testing.T) {
	tests := []struct {
		name         string
		handoff      string
		preload      string
		visible      string
		cdi          []string
		mounts       []string
		ldPreloadEnv string
	}{
		{"env mode names the cards in NVIDIA_VISIBLE_DEVICES and mounts the hook", config.HandoffEnv, config.PreloadFile,
			"GPU-b,GPU-d", nil, []string{lib, limits, "/etc/ld.so.preload"}, ""},
		{"an empty mode is env mode", "", config.PreloadEnv,
			"GPU-b,GPU-d", nil, []string{lib, limits}, lib},
		{"cdi mode names the cards and the hook as CDI devices and voids the NVIDIA variable", config.HandoffCDI, config.PreloadFile,
			"void", []string{"nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-d", "tessera.io/vgpu=hook"}, []string{limits}, ""},
		{"cdi mode leaves LD_PRELOAD to the spec", config.HandoffCDI, config.PreloadEnv,
			"void", []string{"nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-d", "tessera.io/vgpu=hook"}, []string{limits}, ""},
		{"both mode does what env does and names the cards as CDI devices", config.HandoffBoth, config.PreloadFile,
			"GPU-b,GPU-d", []string{"nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-d"}, []string{lib, limits, "/etc/ld.so.preload"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := container(tt.handoff, tt.preload).Response(record(), "/var/lib/tessera/pods/u/main")
			if got := r.Envs["NVIDIA_VISIBLE_DEVICES"]; got != tt.visible {
				t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %q", got, tt.visible)
			}
			if got := cdiNames(r); !reflect.DeepEqual(got, tt.cdi) {
				t.Errorf("CDI devices %v, want %v", got, tt.cdi)
			}
			if got := mountPaths(r); !reflect.DeepEqual(got, tt.mounts) {
				t.Errorf("mounts %v, want %v", got, tt.mounts)
			}
			if got := r.Envs["LD_PRELOAD"]; got != tt.ldPreloadEnv {
				t.Errorf("LD_PRELOAD=%q, want %q", got, tt.ldPreloadEnv)
			}
			// The per-container part is the same in every mode.
			if r.Envs[api.EnvVisibleUUIDs] != "GPU-b,GPU-d" || r.Envs[api.EnvMemoryLimitMiB] != "4096,4096" ||
				r.Envs[api.EnvLimitsFile] != limits || r.Envs[api.EnvSharedRegion] != shmRegion || r.Envs["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
				t.Errorf("vgpu-core environment %v", r.Envs)
			}
		})
	}
}

// The container's directory is never mounted: it gets exactly one file of it, the limits
// file, read-only, at vgpu-core's fixed path, in every mode and whatever the (ignored) Dir
// says. Nothing writable comes from the host: the limits file names the region in the
// container's own pod, on its region volume when Allocate found it, else in /dev/shm.
func TestResponseMountsOnlyTheLimitsFileReadOnly(t *testing.T) {
	want := []string{limits + " <- /var/lib/tessera/pods/u/main/limits.env ro"}
	for _, handoff := range []string{config.HandoffEnv, config.HandoffCDI, config.HandoffBoth} {
		for _, preload := range []string{config.PreloadFile, config.PreloadEnv} {
			c := container(handoff, preload)
			c.Dir = "/elsewhere"
			r := c.Response(record(), "/var/lib/tessera/pods/u/main")
			var got []string
			for _, m := range r.Mounts {
				if m.HostPath == lib || m.ContainerPath == "/etc/ld.so.preload" {
					if !m.ReadOnly {
						t.Errorf("%s/%s: %s mounted writable", handoff, preload, m.ContainerPath)
					}
					continue
				}
				rw := "rw"
				if m.ReadOnly {
					rw = "ro"
				}
				got = append(got, m.ContainerPath+" <- "+m.HostPath+" "+rw)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s/%s: the container's own mounts are %q, want exactly %q", handoff, preload, got, want)
			}
			if r.Envs[api.EnvLimitsFile] != limits || r.Envs[api.EnvSharedRegion] != shmRegion {
				t.Errorf("%s/%s: environment points at %s and %s", handoff, preload, r.Envs[api.EnvLimitsFile], r.Envs[api.EnvSharedRegion])
			}
			if f := c.LimitsFile(record()); !strings.Contains(f, api.EnvSharedRegion+"="+shmRegion+"\n") {
				t.Errorf("limits file names another region:\n%s", f)
			}
			onVolume := record()
			onVolume.RegionVolume = true
			if f := c.LimitsFile(onVolume); !strings.Contains(f, api.EnvSharedRegion+"="+volumeRegion+"\n") {
				t.Errorf("limits file of a container with the region volume names another region:\n%s", f)
			}
		}
	}
}

func TestHookSpecIsAValidCDISpecThatPreloadsTheLibrary(t *testing.T) {
	for _, tt := range []struct {
		preload string
		mounts  []string
		env     []string
	}{
		{config.PreloadFile, []string{lib, "/etc/ld.so.preload"}, nil},
		{config.PreloadEnv, []string{lib}, []string{"LD_PRELOAD=" + lib}},
	} {
		t.Run("preload "+tt.preload, func(t *testing.T) {
			s := container(config.HandoffCDI, tt.preload).HookSpec()
			if err := cdi.Validate(s); err != nil {
				t.Fatal(err)
			}
			if s.Kind != "tessera.io/vgpu" || len(s.Devices) != 1 || s.Devices[0].Name != "hook" {
				t.Fatalf("spec %+v", s)
			}
			e := s.Devices[0].ContainerEdits
			var got []string
			for _, m := range e.Mounts {
				got = append(got, m.ContainerPath)
				if m.Type != "bind" || m.Options[0] != "ro" {
					t.Errorf("mount %+v is not a read-only bind mount", m)
				}
			}
			if !reflect.DeepEqual(got, tt.mounts) || !reflect.DeepEqual(e.Env, tt.env) {
				t.Errorf("mounts %v env %v, want %v %v", got, e.Env, tt.mounts, tt.env)
			}
			if e.Mounts[0].HostPath != lib || len(e.Mounts) > 1 && e.Mounts[1].HostPath != "/var/lib/tessera/ld.so.preload" {
				t.Errorf("host paths %+v", e.Mounts)
			}
		})
	}
}

// The container's limits file counts a CUDA context's footprint inside its memory limit:
// one figure, its cards' largest; none when the agent gives no reserve.
func TestTheLimitsFileCarriesTheCardsContextReserve(t *testing.T) {
	rec := &records.Record{QoS: api.QoSFixedShare, Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 4096, Cores: 30}, {UUID: "GPU-b", MemoryMiB: 4096, Cores: 30}}}
	c := &Container{LogLevel: "warn", ContextReserveMiB: func(uuid string) int64 { return map[string]int64{"GPU-a": 518, "GPU-b": 600}[uuid] }}
	if f := c.LimitsFile(rec); !strings.Contains(f, api.EnvContextReserveMiB+"=600\n") {
		t.Errorf("limits file:\n%s\nwant %s=600 (the larger card's)", f, api.EnvContextReserveMiB)
	}
	c.ContextReserveMiB = nil
	if f := c.LimitsFile(rec); strings.Contains(f, api.EnvContextReserveMiB) {
		t.Errorf("limits file without a reserve names one:\n%s", f)
	}
}

// A whole MIG instance is shown as its own device in every mode: the runtime adds the
// MIG device (by the NVIDIA toolkit's UUID name in CDI mode), and vgpu-core matches the
// MIG UUID that cuDeviceGetUuid_v2 reports, with the instance's memory as the limit.
// A card beside it in the same container keeps its own UUID.
func TestAMIGInstanceIsShownAsItsOwnDeviceInEveryMode(t *testing.T) {
	rec := record()
	rec.Cards[0] = api.CardAssignment{UUID: "GPU-b", MemoryMiB: 40448, Cores: 100, MIG: "MIG-b3"}
	for _, tt := range []struct {
		handoff, visible string
		cdi              []string
	}{
		{config.HandoffEnv, "MIG-b3,GPU-d", nil},
		{config.HandoffCDI, "void", []string{"nvidia.com/gpu=MIG-b3", "nvidia.com/gpu=GPU-d", "tessera.io/vgpu=hook"}},
		{config.HandoffBoth, "MIG-b3,GPU-d", []string{"nvidia.com/gpu=MIG-b3", "nvidia.com/gpu=GPU-d"}},
	} {
		c := container(tt.handoff, config.PreloadFile)
		r := c.Response(rec, "/var/lib/tessera/pods/u/main")
		if got := r.Envs["NVIDIA_VISIBLE_DEVICES"]; got != tt.visible {
			t.Errorf("%s: NVIDIA_VISIBLE_DEVICES=%q, want %q", tt.handoff, got, tt.visible)
		}
		if got := cdiNames(r); !reflect.DeepEqual(got, tt.cdi) {
			t.Errorf("%s: CDI devices %v, want %v", tt.handoff, got, tt.cdi)
		}
		if r.Envs[api.EnvVisibleUUIDs] != "MIG-b3,GPU-d" || r.Envs[api.EnvMemoryLimitMiB] != "40448,4096" || r.Envs[api.EnvSMLimit] != "100,30" {
			t.Errorf("%s: vgpu-core environment %v", tt.handoff, r.Envs)
		}
		if f := c.LimitsFile(rec); !strings.Contains(f, api.EnvVisibleUUIDs+"=MIG-b3,GPU-d\n"+api.EnvMemoryLimitMiB+"=40448,4096\n") {
			t.Errorf("%s: limits file\n%s", tt.handoff, f)
		}
	}
}
