// Package agent wires the node agent's parts together: discovery, the card registry,
// the pod informer, the kubelet server and handoff, the inventory publisher, the health
// monitor, garbage collection and metrics; with cardAPI dra, the DRA driver in place of
// the kubelet server and handoff (dra.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
	"github.com/tessera-gpu/tessera/deviceplugin/coexist"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/gc"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/health"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/inventory"
	"github.com/tessera-gpu/tessera/deviceplugin/kubeletserver"
	"github.com/tessera-gpu/tessera/deviceplugin/metrics"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/deviceplugin/podresources"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// Deps are the agent's connections to the outside.
type Deps struct {
	NVML   nvml.Interface
	Client kubernetes.Interface
	// MetricsListener, when set, serves /metrics, /healthz and /readyz instead of
	// listening on cfg.MetricsAddress.
	MetricsListener net.Listener
	// SysfsRoot is where NUMA nodes are read when NVML cannot tell ("/sys" when empty).
	SysfsRoot string
	// CoexistInterval is how often the node is read for other GPU device plugins
	// (30 s when zero).
	CoexistInterval time.Duration
	// ProcRoot is the procfs that shows the containers' processes ("/proc" when empty).
	ProcRoot string
}

// Run starts the agent and returns when ctx ends or a part cannot start.
func Run(ctx context.Context, cfg *config.Config, deps Deps) error {
	if ret := deps.NVML.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("%w: Init: %v", discovery.ErrNVML, ret)
	}
	defer deps.NVML.Shutdown()
	promReg := prometheus.NewRegistry()
	ready := newReadiness()
	if stop, err := serveHTTP(promReg, ready, cfg.MetricsAddress, deps.MetricsListener); err != nil {
		klog.ErrorS(err, "Metrics and probe endpoint unavailable")
	} else {
		defer stop()
	}
	sysfs := deps.SysfsRoot
	if sysfs == "" {
		sysfs = "/sys"
	}
	res, err := discovery.Discover(deps.NVML, discovery.Options{Shares: cfg.SharesPerCard, SysfsRoot: sysfs})
	if err != nil {
		return err
	}
	// The publisher writes each card's context reserve beside the inventory
	// (tessera.io/context-reserve), and limits.env counts the same figure: the
	// scheduler refuses what vgpu-core could not start.
	reg := cards.NewRegistry(cfg.ContextReserve.OnCards(res.Cards()), res.Links)
	devices := make(map[string]nvml.Device, len(res.Devices))
	for _, d := range res.Devices {
		devices[d.Card.UUID] = d.Handle
	}
	container, err := prepareHost(cfg)
	container.ContextReserveMiB = func(uuid string) int64 {
		card, ok := reg.Card(uuid)
		if !ok {
			return cfg.ContextReserve.MiB("")
		}
		return card.ContextReserveMiB
	}
	if err != nil {
		return err
	}
	if cfg.CardHandoff != config.HandoffEnv || cfg.CardAPI == config.CardAPIDRA {
		checkCardDevices(cfg, res.Cards())
	}
	// Serve nothing (no inventory, no kubelet registration) while another device
	// plugin hands out these cards, unless told to share them.
	guard := &coexist.Guard{Client: deps.Client, Node: cfg.NodeName, Share: cfg.OtherGPUPlugins == config.OtherGPUPluginsShare,
		Interval: deps.CoexistInterval, Report: func(res []string) {
			if len(res) > 0 {
				ready.notReady("another device plugin advertises this node's GPUs: " + strings.Join(res, ", "))
			}
		}}
	if err := guard.WaitClear(ctx); err != nil {
		return err
	}
	if cfg.CardAPI == config.CardAPIDRA {
		return runDRA(ctx, cfg, deps, nodeParts{reg: reg, devices: devices, container: container, guard: guard, ready: ready, prom: promReg})
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	ready.notReady("waiting for the kubelet to accept the device plugin's registration")
	pods := nodepods.NewInformer(deps.Client, cfg.NodeName)
	if err := pods.Start(ctx); err != nil {
		return err
	}
	trust, err := startTrust(ctx, cfg, deps.Client)
	if err != nil {
		return err
	}
	prc, err := podresources.Dial(cfg.PodResourcesSocket, 5*time.Second)
	if err != nil {
		return err
	}
	defer prc.Close()
	uninst := watchUninstall(ctx, cfg, deps.Client, prc)
	defer uninst.stop()
	store := &records.Store{Root: cfg.StateDir}
	m := metrics.New(promReg, metrics.Sources{Node: cfg.NodeName, Cards: reg, Store: store, Pods: pods, ProcRoot: deps.ProcRoot,
		KubeletPodsDir: cfg.KubeletPodsDir})
	h := handoff.New(handoff.Config{Node: cfg.NodeName, Resource: cfg.ResourceName, Names: resourceNames(cfg),
		IdentifyTimeout: cfg.IdentifyTimeout.Duration, Container: container, Trust: trust, MIGLayout: nvmlMIGLayout(devices, reg)},
		reg, pods, prc, store, &nodepods.PatchMarker{Client: deps.Client, Attempts: 3, Backoff: 200 * time.Millisecond}, m)
	srv := kubeletserver.New(kubeletserver.Options{PluginDir: cfg.DevicePluginDir, SocketName: cfg.PluginSocket,
		Resource: cfg.ResourceName, OnRegistered: func() { m.Registered(); ready.ready() },
		ReportNUMA: cfg.SlotTopology == config.SlotTopologyNUMA, AwaitCordons: true}, reg, h)
	// Each write of the publisher returns the Node: the coexistence guard reads other
	// plugins' resources from it, and the kubelet server the card cordons, which so
	// cost no read of their own and follow the Node within one heartbeat.
	observeNode := func(n *corev1.Node) { guard.Observe(n); srv.ObserveNode(n) }
	pub := inventory.New(deps.Client, reg, inventory.Options{Node: cfg.NodeName, Heartbeat: cfg.HeartbeatInterval.Duration,
		VolcanoCompat: cfg.VolcanoCompat, CardAPI: cfg.CardAPI, Observe: observeNode, MIGRepartition: cfg.MIGRepartition}, m)
	mon := health.New(deps.NVML, devices, reg, health.Options{FatalXIDs: cfg.Health.FatalXIDs,
		CheckInterval: cfg.Health.CheckInterval.Duration, RecoverAfter: cfg.Health.RecoverAfter.Duration})
	maint := gc.New(pods, store, prc, h.MarkIfComplete, cfg.GCGracePeriod.Duration)
	memGuard := newMemoryGuard(cfg, deps.Client, deps.ProcRoot, devices, recordLimits(store, pods), promReg)

	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() { _ = srv.Run(ctx) })
	run(func() { pub.Run(ctx) })
	run(func() { mon.Run(ctx) })
	run(func() { maint.Run(ctx, cfg.GCInterval.Duration) })
	if memGuard != nil {
		run(func() { memGuard.Run(ctx) })
	}
	if cfg.MIGRepartition {
		plans := newMIGPlans(deps.Client, cfg.NodeName, devices, reg, cfg.SharesPerCard, promReg)
		run(func() { plans.Run(ctx) })
	}
	if cfg.CardHandoff == config.HandoffCDI {
		run(func() { keepHookSpec(ctx, cfg.CDISpecDir, container.HookSpec(), cfg.GCInterval.Duration) })
	}
	var conflict error
	run(func() {
		if err := guard.Watch(ctx); errors.Is(err, coexist.ErrConflict) {
			klog.ErrorS(err, "Stopping: another device plugin now advertises this node's GPUs")
			ready.notReady(err.Error())
			conflict = err
			stop()
		}
	})
	klog.InfoS("Node agent running", "node", cfg.NodeName, "cards", len(res.Devices), "resource", cfg.ResourceName)
	<-ctx.Done()
	wg.Wait()
	if conflict == nil {
		uninst.removeIfUninstalled() // before prc closes: it asks the kubelet which pods hold slots
	}
	return conflict
}

// nvmlMIGLayout reads a card's MIG devices from NVML at each call: the handoff checks a
// MIG assignment against the card as it is when the container is set up.
func nvmlMIGLayout(devices map[string]nvml.Device, reg *cards.Registry) handoff.MIGLayout {
	return func(parent string) ([]api.MIGInstance, error) {
		d, ok := devices[parent]
		card, known := reg.Card(parent)
		if !ok || !known {
			return nil, fmt.Errorf("card %s is not on this node", parent)
		}
		devs, err := discovery.ReadMIGDevices(d, parent, uint64(card.MemoryMiB))
		if err != nil {
			return nil, err
		}
		out := make([]api.MIGInstance, len(devs))
		for i, m := range devs {
			out[i] = m.MIGInstance
		}
		return out, nil
	}
}

func resourceNames(cfg *config.Config) api.ResourceNames {
	n := api.DefaultResourceNames()
	n.Number = corev1.ResourceName(cfg.ResourceName)
	return n
}

// The agent wires these together; the interfaces are the consumers' own.
var (
	_ kubeletserver.Handler = (*handoff.Handoff)(nil)
	_ handoff.PodLookup     = (*nodepods.Informer)(nil)
	_ handoff.Marker        = (*nodepods.PatchMarker)(nil)
	_ handoff.KubeletPods   = (*podresources.Client)(nil)
)

// prepareHost creates the state directory and the ld.so.preload file mounted into
// containers. A missing hook library is logged, not fatal: the agent still publishes
// the node, and containers fail to start on the missing mount until it is installed.
func prepareHost(cfg *config.Config) (hookenv.Container, error) {
	c := hookenv.Container{HookLibrary: cfg.HookLibrary, Preload: cfg.Preload, Dir: cfg.ContainerDir,
		LogLevel: cfg.VGPULogLevel, PreloadHostFile: filepath.Join(cfg.StateDir, "ld.so.preload"),
		Handoff: cfg.CardHandoff, CardKind: cfg.CDICardKind}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "pods"), 0o755); err != nil {
		return c, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.WriteFile(c.PreloadHostFile, []byte(cfg.HookLibrary+"\n"), 0o644); err != nil {
		return c, fmt.Errorf("write %s: %w", c.PreloadHostFile, err)
	}
	if _, err := os.Stat(cfg.HookLibrary); err != nil {
		klog.ErrorS(err, "Hook library missing on the host; containers will fail to mount it", "path", cfg.HookLibrary)
	}
	if cfg.CardHandoff != config.HandoffCDI {
		return c, nil
	}
	// The spec is kept when the agent stops or leaves cdi mode: the kubelet replays a
	// container's CDI device names (tessera.io/vgpu=hook) whenever it restarts it.
	changed, err := cdi.Write(cfg.CDISpecDir, c.HookSpec())
	if err != nil {
		return c, fmt.Errorf("write the hook library's CDI spec: %w", err)
	}
	if changed {
		klog.InfoS("Wrote the hook library's CDI spec", "file", filepath.Join(cfg.CDISpecDir, cdi.FileName(cdi.HookKind)),
			"device", cdi.QualifiedName(cdi.HookKind, cdi.HookDevice))
	}
	return c, nil
}

// keepHookSpec writes the hook spec again whenever it is gone or altered (a cleaned
// /var/run, an edit by hand), checking every interval; an unchanged file is not touched.
func keepHookSpec(ctx context.Context, dir string, spec *specs.Spec, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if changed, err := cdi.Write(dir, spec); err != nil {
			klog.ErrorS(err, "Cannot restore the hook library's CDI spec", "dir", dir)
		} else if changed {
			klog.InfoS("Restored the hook library's CDI spec", "file", filepath.Join(dir, cdi.FileName(spec.Kind)))
		}
	}
}

// checkCardDevices logs the cards and MIG devices whose CDI device (cdiCardKind=UUID)
// no spec on the node defines: containers given one fail to be created ("unresolvable
// CDI devices") until the NVIDIA toolkit's spec names cards and MIG devices by UUID.
func checkCardDevices(cfg *config.Config, cs []api.Card) {
	dirs := []string{"/etc/cdi", cfg.CDISpecDir}
	names, problems := cdi.DeviceNames(dirs, cfg.CDICardKind)
	var missing []string
	for _, c := range cs {
		if _, ok := names[c.UUID]; !ok {
			missing = append(missing, cdi.QualifiedName(cfg.CDICardKind, c.UUID))
		}
		// A MIG instance is handed out by its own UUID name.
		for _, m := range c.MIGInstances {
			if _, ok := names[m.UUID]; !ok {
				missing = append(missing, cdi.QualifiedName(cfg.CDICardKind, m.UUID))
			}
		}
	}
	if len(missing) > 0 {
		klog.ErrorS(nil, "No CDI spec on the node defines these cards; containers given them will not start until one does "+
			"(generate the NVIDIA toolkit's spec with UUID device names)", "missing", missing, "dirs", dirs, "problems", problems)
		return
	}
	klog.InfoS("Every card has its CDI device", "kind", cfg.CDICardKind, "cards", len(cs))
}
