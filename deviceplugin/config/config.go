// Package config is the node agent's configuration: a versioned file, environment
// variables and flags, in increasing precedence (flag > env > file > default). Unknown
// versions and unknown fields are rejected; Validate reports every problem at once.
package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
)

// Version is the config file version this build reads.
const Version = "v1"

// Preload modes: how the hook library gets into every process of a container.
const (
	// PreloadFile mounts an ld.so.preload naming the library over /etc/ld.so.preload.
	// It survives entrypoints that clear the environment; it is the default.
	PreloadFile = "ld-so-preload"
	// PreloadEnv sets LD_PRELOAD, for images that ship their own /etc/ld.so.preload.
	PreloadEnv = "env"
)

// Card handoff modes: how the container runtime learns which cards a container gets.
const (
	// HandoffEnv sets NVIDIA_VISIBLE_DEVICES, read by the NVIDIA container runtime (legacy
	// mode); the hook library arrives as kubelet mounts. The default.
	HandoffEnv = "env"
	// HandoffCDI names the cards as CDI devices of the NVIDIA toolkit's spec and the hook
	// library as a device of the agent's own spec; the runtime (containerd or CRI-O with
	// CDI on) applies both. NVIDIA_VISIBLE_DEVICES is set to "void".
	HandoffCDI = "cdi"
	// HandoffBoth does what env does and also names the cards as CDI devices.
	HandoffBoth = "both"
)

// Slot topology: what the kubelet's slots say about NUMA nodes.
const (
	// SlotTopologyNone advertises slots without NUMA nodes: the kubelet's Topology Manager
	// then has no preference for them and never narrows the scheduler's card choice. The
	// default.
	SlotTopologyNone = "none"
	// SlotTopologyNUMA advertises each slot on its card's NUMA node. Only safe where the
	// kubelet's topologyManagerPolicy is none (docs/device-plugin.md, section 10).
	SlotTopologyNUMA = "numa"
)

// Card APIs: how the agent offers the node's cards to the kubelet. A node uses one, never
// both: the two would hand out the same cards from two ledgers.
const (
	// CardAPIDevicePlugin serves the kubelet's device plugin API (slots of the vGPU
	// resource) and hands cards off from the scheduler's assignment. The default.
	CardAPIDevicePlugin = "device-plugin"
	// CardAPIDRA runs the DRA driver vgpu.tessera.io instead (deviceplugin/dra): the
	// node's cards as a ResourceSlice and claims prepared through the kubelet's DRA API.
	CardAPIDRA = "dra"
)

// ContainerPath is where a container finds the two files the agent gives it:
// ContainerPath/limits.env (read-only) and ContainerPath/region (read-write). vgpu-core
// reads its limits only from ContainerPath/limits.env, so containerDir must be this path.
const ContainerPath = "/var/run/tessera"

// DefaultFatalXIDs are the XIDs that mean the card needs a reset or has failed. XIDs
// that an application causes (13, 31, 43, 45, 68, ...) are not in the list.
var DefaultFatalXIDs = []uint64{48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("invalid configuration")

// Config is the node agent's configuration; docs/device-plugin.md documents each field.
type Config struct {
	Version            string `json:"version"`
	NodeName           string `json:"nodeName,omitempty"`
	Kubeconfig         string `json:"kubeconfig,omitempty"`
	ResourceName       string `json:"resourceName"`
	SharesPerCard      int    `json:"sharesPerCard"`
	DevicePluginDir    string `json:"devicePluginDir"`
	PluginSocket       string `json:"pluginSocket"`
	PodResourcesSocket string `json:"podResourcesSocket"`
	// KubeletPodsDir is the kubelet's pods directory as the agent sees it: the agent reads
	// each container's region from its pod's region volume there (api.RegionVolumeName).
	KubeletPodsDir    string          `json:"kubeletPodsDir"`
	StateDir          string          `json:"stateDir"`
	HookLibrary       string          `json:"hookLibrary"`
	Preload           string          `json:"preload"`
	ContainerDir      string          `json:"containerDir"`
	VGPULogLevel      string          `json:"vgpuLogLevel"`
	HeartbeatInterval metav1.Duration `json:"heartbeatInterval"`
	VolcanoCompat     bool            `json:"volcanoCompat"`
	MetricsAddress    string          `json:"metricsAddress"`
	IdentifyTimeout   metav1.Duration `json:"identifyTimeout"`
	GCInterval        metav1.Duration `json:"gcInterval"`
	GCGracePeriod     metav1.Duration `json:"gcGracePeriod"`
	Health            Health          `json:"health"`

	// MIGRepartition lets the scheduler change the MIG layout of this node's idle
	// cards (tessera.io/mig-plan); off by default.
	MIGRepartition bool `json:"migRepartition"`

	// OtherGPUPlugins is what the agent does on a node where another device plugin
	// (NVIDIA's) advertises GPUs: "refuse" serves nothing there, "share" serves anyway.
	OtherGPUPlugins string `json:"otherGPUPlugins"`
	// CardHandoff is how cards reach a container: env, cdi or both (HandoffEnv, ...).
	CardHandoff string `json:"cardHandoff"`
	// CDICardKind is the CDI kind whose devices, named by card UUID, are the cards (the
	// NVIDIA Container Toolkit's spec: nvidia.com/gpu).
	CDICardKind string `json:"cdiCardKind"`
	// CDISpecDir is where the agent writes its own CDI spec (the hook library).
	CDISpecDir string `json:"cdiSpecDir"`
	// SlotTopology is none or numa (SlotTopologyNone, SlotTopologyNUMA).
	SlotTopology string `json:"slotTopology"`
	// CardAPI is device-plugin or dra (CardAPIDevicePlugin, CardAPIDRA).
	CardAPI string `json:"cardAPI"`
	// DRAPluginDir is the kubelet's directory of DRA plugin sockets: with cardAPI dra the
	// driver serves dra.sock in DRAPluginDir/vgpu.tessera.io.
	DRAPluginDir string `json:"draPluginDir"`
	// DRARegistrationDir is the kubelet's plugin registration directory, where the DRA
	// driver puts its registration socket.
	DRARegistrationDir string `json:"draRegistrationDir"`
	// UninstallDaemonSet is "namespace/name" of the agent's own DaemonSet: once it is
	// deleted (helm uninstall), the agent removes the host files when it stops, if no pod
	// holds the node's slots (deviceplugin/uninstall). Empty: the files always stay.
	UninstallDaemonSet string `json:"uninstallDaemonSet,omitempty"`
	// AssignmentKeys is "namespace/name" of the ConfigMap where the scheduler publishes
	// the keys its card assignments are signed with; the agent honours only assignments
	// that verify. Empty: signatures are not checked (the agent warns at start).
	AssignmentKeys string `json:"assignmentKeys,omitempty"`
	// UnsignedAssignments is what the agent does with an assignment that carries no
	// signature at all, when AssignmentKeys is set: "refuse", or "allow" while migrating
	// from Volcano's deviceshare, whose scheduler signs nothing.
	UnsignedAssignments string `json:"unsignedAssignments"`
	// ContextReserve is the memory a CUDA context takes on a card, by card model: counted
	// inside each container's memory limit (vgpu-core's TESSERA_CONTEXT_RESERVE_MIB), so that
	// the memory the scheduler books for a card is what its containers hold on it.
	ContextReserve ContextReserve `json:"contextReserve"`
	// MemoryGuard holds every pod to its memory limits from NVML's own accounting,
	// whatever the container did to vgpu-core (deviceplugin/memguard).
	MemoryGuard MemoryGuard `json:"memoryGuard"`
}

// MemoryGuard configures the node-side memory guard.
type MemoryGuard struct {
	// Mode is off, report (an event on the pod) or enforce (the event, and the pod's
	// largest processes on the card are killed until it is within its limit). It needs
	// the agent in the host's pid namespace; without it the guard stays off and says so.
	Mode string `json:"mode"`
	// Interval is the time between two checks of every card.
	Interval metav1.Duration `json:"interval"`
	// OverChecks is how many checks in a row a pod must be over before the guard acts.
	OverChecks int `json:"overChecks"`
	// ContextAllowance is allowed per process on top of the limit: the driver's own
	// footprint of a CUDA context, which NVML counts and the limit does not.
	ContextAllowance resource.Quantity `json:"contextAllowance"`
	// CountedProcesses caps how many processes of a pod on a card earn the allowance.
	CountedProcesses int `json:"countedProcesses"`
}

// ContextReserve is the CUDA context footprint by card model.
type ContextReserve struct {
	// Default applies to a model no entry of Models matches.
	Default resource.Quantity `json:"default"`
	// Models are tried in order; the first whose Match is in the card's model name (NVML's,
	// case-insensitive) wins.
	Models []ModelReserve `json:"models,omitempty"`
}

// ModelReserve is one card model's context footprint.
type ModelReserve struct {
	Match   string            `json:"match"`
	Reserve resource.Quantity `json:"reserve"`
}

// MiB returns the reserve for a card model, in MiB (rounded up).
func (c ContextReserve) MiB(model string) int64 {
	q := c.Default
	lower := strings.ToLower(model)
	for _, m := range c.Models {
		if m.Match != "" && strings.Contains(lower, strings.ToLower(m.Match)) {
			q = m.Reserve
			break
		}
	}
	return (q.Value() + (1<<20 - 1)) >> 20
}

// OnCards returns the cards, each with its model's reserve (MiB) as the agent publishes
// it beside the node inventory (tessera.io/context-reserve), so that the scheduler
// refuses a card to a container whose memory there is below what a context takes.
func (c ContextReserve) OnCards(cards []api.Card) []api.Card {
	out := make([]api.Card, len(cards))
	for i, card := range cards {
		card.ContextReserveMiB = c.MiB(card.Model)
		out[i] = card
	}
	return out
}

// DefaultContextReserve is what was measured (an H100 80GB HBM3 and an H200, driver 580,
// CUDA 13: 518 MiB per context on both) and, for every other model, the same figure
// rounded up: not measured.
func DefaultContextReserve() ContextReserve {
	return ContextReserve{Default: resource.MustParse("520Mi"),
		Models: []ModelReserve{{Match: "H100", Reserve: resource.MustParse("518Mi")}, {Match: "H200", Reserve: resource.MustParse("518Mi")}}}
}

// MaxContextReserve bounds every reserve: no CUDA context takes more.
const MaxContextReserve = 4 << 30

// Memory guard modes.
const (
	MemoryGuardOff     = "off"
	MemoryGuardReport  = "report"
	MemoryGuardEnforce = "enforce"
)

// What the agent does with unsigned assignments.
const (
	UnsignedRefuse = "refuse"
	UnsignedAllow  = "allow"
)

// What the agent does beside another GPU device plugin on its node.
const (
	OtherGPUPluginsRefuse = "refuse"
	OtherGPUPluginsShare  = "share"
)

// Health configures the health monitor.
type Health struct {
	CheckInterval metav1.Duration `json:"checkInterval"`
	RecoverAfter  metav1.Duration `json:"recoverAfter"`
	FatalXIDs     []uint64        `json:"fatalXIDs"`
}

// Default returns the defaults every other source overrides.
func Default() *Config {
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	return &Config{
		Version:            Version,
		ResourceName:       api.ResourceNumber,
		SharesPerCard:      10,
		DevicePluginDir:    "/var/lib/kubelet/device-plugins",
		PluginSocket:       "tessera-vgpu.sock",
		PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		KubeletPodsDir:     "/var/lib/kubelet/pods",
		StateDir:           "/var/lib/tessera",
		HookLibrary:        "/usr/local/tessera/lib/libvgpu.so",
		Preload:            PreloadFile,
		ContainerDir:       ContainerPath,
		VGPULogLevel:       "warn",
		HeartbeatInterval:  d(30 * time.Second),
		MetricsAddress:     ":9394",
		IdentifyTimeout:    d(5 * time.Second),
		GCInterval:         d(time.Minute),
		GCGracePeriod:      d(10 * time.Minute),
		Health: Health{CheckInterval: d(30 * time.Second), RecoverAfter: d(5 * time.Minute),
			FatalXIDs: append([]uint64(nil), DefaultFatalXIDs...)},
		OtherGPUPlugins:     OtherGPUPluginsRefuse,
		UnsignedAssignments: UnsignedRefuse,
		CardHandoff:         HandoffEnv,
		CDICardKind:         "nvidia.com/gpu",
		CDISpecDir:          "/var/run/cdi",
		SlotTopology:        SlotTopologyNone,
		CardAPI:             CardAPIDevicePlugin,
		DRAPluginDir:        "/var/lib/kubelet/plugins",
		DRARegistrationDir:  "/var/lib/kubelet/plugins_registry",
		ContextReserve:      DefaultContextReserve(),
		MemoryGuard: MemoryGuard{Mode: MemoryGuardEnforce, Interval: d(5 * time.Second), OverChecks: 2,
			ContextAllowance: resource.MustParse("768Mi"), CountedProcesses: 4},
	}
}

// Validate returns every problem, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...)))
	}
	if c.Version != Version {
		bad("version", "%q, this build reads %q", c.Version, Version)
	}
	if c.NodeName == "" {
		bad("nodeName", "empty (set it, or NODE_NAME from the downward API)")
	}
	if c.ResourceName == "" {
		bad("resourceName", "empty")
	}
	if c.SharesPerCard < 1 || c.SharesPerCard > 1000 {
		bad("sharesPerCard", "%d, want 1..1000", c.SharesPerCard)
	}
	for field, p := range map[string]string{"devicePluginDir": c.DevicePluginDir, "podResourcesSocket": c.PodResourcesSocket,
		"kubeletPodsDir": c.KubeletPodsDir, "stateDir": c.StateDir, "hookLibrary": c.HookLibrary, "containerDir": c.ContainerDir, "cdiSpecDir": c.CDISpecDir,
		"draPluginDir": c.DRAPluginDir, "draRegistrationDir": c.DRARegistrationDir} {
		if !filepath.IsAbs(p) {
			bad(field, "%q is not an absolute path", p)
		}
	}
	if c.PluginSocket == "" || filepath.Base(c.PluginSocket) != c.PluginSocket {
		bad("pluginSocket", "%q must be a file name inside devicePluginDir", c.PluginSocket)
	}
	if filepath.IsAbs(c.ContainerDir) && filepath.Clean(c.ContainerDir) != ContainerPath {
		bad("containerDir", "%q must be %s: vgpu-core reads its limits only from %s/limits.env (the key is kept so that existing files load)",
			c.ContainerDir, ContainerPath, ContainerPath)
	}
	if c.Preload != PreloadFile && c.Preload != PreloadEnv {
		bad("preload", "%q, want %s or %s", c.Preload, PreloadFile, PreloadEnv)
	}
	switch c.VGPULogLevel {
	case "error", "warn", "info", "debug":
	default:
		bad("vgpuLogLevel", "%q, want error, warn, info or debug", c.VGPULogLevel)
	}
	for field, d := range map[string]metav1.Duration{"heartbeatInterval": c.HeartbeatInterval, "identifyTimeout": c.IdentifyTimeout,
		"gcInterval": c.GCInterval, "gcGracePeriod": c.GCGracePeriod, "health.checkInterval": c.Health.CheckInterval} {
		if d.Duration <= 0 {
			bad(field, "%v must be positive", d.Duration)
		}
	}
	if c.OtherGPUPlugins != OtherGPUPluginsRefuse && c.OtherGPUPlugins != OtherGPUPluginsShare {
		bad("otherGPUPlugins", "%q, want %s or %s", c.OtherGPUPlugins, OtherGPUPluginsRefuse, OtherGPUPluginsShare)
	}
	if c.CardHandoff != HandoffEnv && c.CardHandoff != HandoffCDI && c.CardHandoff != HandoffBoth {
		bad("cardHandoff", "%q, want %s, %s or %s", c.CardHandoff, HandoffEnv, HandoffCDI, HandoffBoth)
	}
	if err := cdi.ValidateKind(c.CDICardKind); err != nil {
		bad("cdiCardKind", "%v", err)
	} else if c.CDICardKind == cdi.HookKind {
		bad("cdiCardKind", "%q is the agent's own kind (the hook library), not the cards'", c.CDICardKind)
	}
	if c.SlotTopology != SlotTopologyNone && c.SlotTopology != SlotTopologyNUMA {
		bad("slotTopology", "%q, want %s or %s", c.SlotTopology, SlotTopologyNone, SlotTopologyNUMA)
	}
	if c.CardAPI != CardAPIDevicePlugin && c.CardAPI != CardAPIDRA {
		bad("cardAPI", "%q, want %s or %s", c.CardAPI, CardAPIDevicePlugin, CardAPIDRA)
	}
	if c.UninstallDaemonSet != "" {
		if ns, name, ok := strings.Cut(c.UninstallDaemonSet, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			bad("uninstallDaemonSet", "%q, want namespace/name of the agent's DaemonSet, or empty", c.UninstallDaemonSet)
		}
	}
	if c.UnsignedAssignments != UnsignedRefuse && c.UnsignedAssignments != UnsignedAllow {
		bad("unsignedAssignments", "%q, want %s or %s", c.UnsignedAssignments, UnsignedRefuse, UnsignedAllow)
	}
	if ns, name, ok := strings.Cut(c.AssignmentKeys, "/"); c.AssignmentKeys != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")) {
		bad("assignmentKeys", "%q, want namespace/name of the scheduler's key ConfigMap, or empty", c.AssignmentKeys)
	}
	for i, q := range append([]resource.Quantity{c.ContextReserve.Default}, modelReserves(c.ContextReserve.Models)...) {
		field := "contextReserve.default"
		if i > 0 {
			field = fmt.Sprintf("contextReserve.models[%d].reserve", i-1)
		}
		if v := q.Value(); v < 0 || v > MaxContextReserve {
			bad(field, "%s, want 0..4Gi", q.String())
		}
	}
	for i, m := range c.ContextReserve.Models {
		if strings.TrimSpace(m.Match) == "" {
			bad(fmt.Sprintf("contextReserve.models[%d].match", i), "empty: it would match every card")
		}
	}
	switch c.MemoryGuard.Mode {
	case MemoryGuardOff, MemoryGuardReport, MemoryGuardEnforce:
	default:
		bad("memoryGuard.mode", "%q, want %s, %s or %s", c.MemoryGuard.Mode, MemoryGuardOff, MemoryGuardReport, MemoryGuardEnforce)
	}
	if c.MemoryGuard.Mode != MemoryGuardOff {
		if d := c.MemoryGuard.Interval.Duration; d < time.Second || d > 10*time.Minute {
			bad("memoryGuard.interval", "%v, want 1s..10m", d)
		}
		if n := c.MemoryGuard.OverChecks; n < 1 || n > 100 {
			bad("memoryGuard.overChecks", "%d, want 1..100", n)
		}
		if v := c.MemoryGuard.ContextAllowance.Value(); v < 0 || v > 16<<30 {
			bad("memoryGuard.contextAllowance", "%s, want 0..16Gi", c.MemoryGuard.ContextAllowance.String())
		}
		if n := c.MemoryGuard.CountedProcesses; n < 0 || n > 64 {
			bad("memoryGuard.countedProcesses", "%d, want 0..64", n)
		}
	}
	if c.Health.RecoverAfter.Duration < 0 {
		bad("health.recoverAfter", "%v is negative", c.Health.RecoverAfter.Duration)
	}
	return errors.Join(errs...)
}

func modelReserves(ms []ModelReserve) []resource.Quantity {
	out := make([]resource.Quantity, len(ms))
	for i, m := range ms {
		out[i] = m.Reserve
	}
	return out
}
