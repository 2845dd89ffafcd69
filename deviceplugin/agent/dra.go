package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/coexist"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/dra"
	"github.com/tessera-gpu/tessera/deviceplugin/health"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/inventory"
	"github.com/tessera-gpu/tessera/deviceplugin/metrics"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/deviceplugin/podresources"
	"github.com/tessera-gpu/tessera/deviceplugin/uninstall"
)

// nodeParts is what Run builds for either card API before it branches: the discovered
// cards, the container setup, the coexistence guard (already clear) and the probes.
type nodeParts struct {
	reg       *cards.Registry
	devices   map[string]nvml.Device
	container hookenv.Container
	guard     *coexist.Guard
	ready     *readiness
	prom      *prometheus.Registry
}

// runDRA serves the node's cards through the DRA driver vgpu.tessera.io instead of the
// device plugin: no kubelet device-plugin server, no handoff, no pod informer, no
// assignment keys, no garbage collection of handoff directories. The usage metrics report
// each pod's claims (dra.ClaimSource), read from the claims' regions on the pods' region
// volumes. What the node publishes
// for the scheduler (inventory, heartbeat, tessera.io/card-api), the health monitor and the
// coexistence watch run as in device-plugin mode; the health monitor's verdicts reach the
// ResourceSlice as taints through the shared card registry.
//
// The memory guard holds each pod to the memory of the prepared claims its containers
// reference (dra.GuardLimits); the pods bound to the node come from an informer of the
// agent's own, which also tells the driver whether a new claim's pods have the region
// volume (dra.ChooseRegion).
//
// It returns when ctx ends (nil), another GPU device plugin appears (that conflict), or
// the driver fails to start or stops on its own (its error).
func runDRA(ctx context.Context, cfg *config.Config, deps Deps, n nodeParts) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	n.ready.notReady("starting the DRA driver")
	prc, err := podresources.Dial(cfg.PodResourcesSocket, 5*time.Second)
	if err != nil {
		return err
	}
	defer prc.Close()
	warnDevicePluginPods(ctx, prc, cfg.ResourceName)
	uninst := watchUninstall(ctx, cfg, deps.Client, prc)
	defer uninst.stop()
	// The pods bound to the node: where a new claim's regions go, the memory guard's pods,
	// and the pods whose claims the metrics report.
	nodePods := nodepods.NewInformer(deps.Client, cfg.NodeName)
	// The driver's preparer exists once the driver has started; scrapes before that see
	// no claim.
	var prep atomic.Pointer[dra.Preparer]
	claims := dra.ClaimSource{Pods: nodePods.List, Prepared: func() map[string]dra.PreparedClaim {
		if p := prep.Load(); p != nil {
			return p.Prepared()
		}
		return nil
	}}
	// The card gauges and, per pod and claim, the container series read from the claim's
	// region on the pod's region volume.
	m := metrics.New(n.prom, metrics.Sources{Node: cfg.NodeName, Cards: n.reg, Store: claims, Pods: nodePods,
		ProcRoot: deps.ProcRoot, KubeletPodsDir: cfg.KubeletPodsDir})
	pub := inventory.New(deps.Client, n.reg, inventory.Options{Node: cfg.NodeName, Heartbeat: cfg.HeartbeatInterval.Duration,
		VolcanoCompat: cfg.VolcanoCompat, CardAPI: cfg.CardAPI, Observe: n.guard.Observe}, m)
	mon := health.New(deps.NVML, n.devices, n.reg, health.Options{FatalXIDs: cfg.Health.FatalXIDs,
		CheckInterval: cfg.Health.CheckInterval.Duration, RecoverAfter: cfg.Health.RecoverAfter.Duration})
	nodePods.Run(ctx)
	defer func() { stop(); nodePods.Shutdown() }()
	dcfg := draConfig(cfg, n.container)
	dcfg.Prepare.Pods = nodePods.Getter(2 * time.Second)
	// The driver's socket directory is its own (the kubelet creates only the registration
	// directory); the helper listens there but does not create it.
	if err := os.MkdirAll(dcfg.PluginDataDir, 0o750); err != nil {
		return fmt.Errorf("create the DRA driver's socket directory: %w", err)
	}
	drv := dra.New(dcfg, deps.Client, n.reg)

	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() { pub.Run(ctx) })
	run(func() { mon.Run(ctx) })
	if err := drv.Start(ctx); err != nil {
		stopping := ctx.Err() != nil // told to stop while the driver waited for its Node
		stop()
		wg.Wait()
		if stopping {
			return nil
		}
		return fmt.Errorf("start the DRA driver: %w", err)
	}
	prep.Store(drv.Preparer())
	if g := newMemoryGuard(cfg, deps.Client, deps.ProcRoot, n.devices, dra.GuardLimits(drv.Preparer(), nodePods.List), n.prom); g != nil {
		run(func() { g.Run(ctx) })
	}
	n.ready.ready()
	var conflict error
	run(func() {
		if err := n.guard.Watch(ctx); errors.Is(err, coexist.ErrConflict) {
			klog.ErrorS(err, "Stopping: another device plugin now advertises this node's GPUs")
			n.ready.notReady(err.Error())
			conflict = err
			stop()
		}
	})
	klog.InfoS("Node agent running", "node", cfg.NodeName, "cards", len(n.devices), "cardAPI", cfg.CardAPI, "driver", dra.DriverName,
		"claims", len(drv.Preparer().Prepared()))
	err = waitDriver(ctx, drv)
	if err != nil {
		klog.ErrorS(err, "Stopping: the DRA driver stopped")
		n.ready.notReady(err.Error())
	}
	stop()
	wg.Wait()
	drv.Stop()
	if err != nil {
		return err
	}
	if conflict == nil {
		uninst.claims = func() int { return len(drv.Preparer().Prepared()) }
		uninst.removeIfUninstalled()
	}
	return conflict
}

// draConfig is the driver's configuration from the agent's: its state under the agent's
// state directory, its claim specs beside the agent's CDI spec, its sockets in the
// kubelet's directories.
func draConfig(cfg *config.Config, container hookenv.Container) dra.Config {
	return dra.Config{
		NodeName: cfg.NodeName,
		Prepare: dra.PrepareConfig{StateDir: dra.StateDir(cfg.StateDir), CDISpecDir: cfg.CDISpecDir, CardKind: cfg.CDICardKind,
			Container: container},
		RegistrarDir:  cfg.DRARegistrationDir,
		PluginDataDir: filepath.Join(cfg.DRAPluginDir, dra.DriverName),
	}
}

// stoppable is what waitDriver watches (*dra.Driver).
type stoppable interface {
	Done() <-chan struct{}
	Err() error
}

// waitDriver returns nil when ctx ends, and the driver's error when it stops on its own
// first.
func waitDriver(ctx context.Context, d stoppable) error {
	select {
	case <-ctx.Done():
		return nil
	case <-d.Done():
	}
	if ctx.Err() != nil {
		return nil // the driver ends with ctx: not its own stop
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("DRA driver %s: %w", dra.DriverName, err)
	}
	return fmt.Errorf("DRA driver %s stopped without an error", dra.DriverName)
}

// warnDevicePluginPods says which pods still hold the device plugin's slots on a node
// that now runs the DRA driver: their shares are not in the DRA driver's ledger, so a
// claim can be prepared on a card beyond what they leave.
func warnDevicePluginPods(ctx context.Context, kubelet uninstall.Lister, resource string) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pods, err := kubelet.List(lctx)
	if err != nil {
		klog.ErrorS(err, "Cannot ask the kubelet for pods holding the device plugin's slots")
		return
	}
	if holders := uninstall.Holders(pods, resource); len(holders) > 0 {
		klog.ErrorS(nil, "Pods from device-plugin mode still hold cards on this node; the DRA driver does not count their shares: drain them",
			"resource", resource, "pods", holders)
	}
}
