package dra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// Cards is the agent's live card view the driver publishes (*cards.Registry).
type Cards interface {
	CardSource
	UnhealthyReason(uuid string) string
	// Subscribe notifies after each health change; the function ends the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Config is the driver's configuration.
type Config struct {
	// NodeName is this node; it names the pool and owns the ResourceSlice.
	NodeName string
	// Prepare configures claim preparation; Prepare.Pool is set to NodeName.
	Prepare PrepareConfig
	// MinMemoryMiB is the smallest memory share published (DefaultMinMemoryMiB when 0).
	MinMemoryMiB int64
	// RegistrarDir is the kubelet's plugin registration directory
	// (kubeletplugin.KubeletRegistryDir when empty).
	RegistrarDir string
	// PluginDataDir holds the driver's gRPC socket, dra.sock
	// (kubeletplugin.KubeletPluginsDir/vgpu.tessera.io when empty).
	PluginDataDir string
}

// Driver is the agent's DRA driver: from Start until Stop it serves the kubelet's DRA
// gRPC API through the kubeletplugin helper, registers with the kubelet, and publishes
// the node's ResourceSlice again whenever a card's health or the node's cordons change.
type Driver struct {
	cfg    Config
	client kubernetes.Interface
	cards  Cards

	prep   *Preparer
	helper *kubeletplugin.Helper
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	kick   chan struct{}
	done   <-chan struct{}

	mu      sync.Mutex
	cordons *api.NodeCordons
	// unreadable is set while the node's cordon annotation does not decode: every card
	// then counts as cordoned, as the scheduler and the device plugin read such a node.
	unreadable bool
	fatal      error
}

// New returns a driver that is not started.
func New(cfg Config, client kubernetes.Interface, cs Cards) *Driver {
	cfg.Prepare.Pool = cfg.NodeName
	return &Driver{cfg: cfg, client: client, cards: cs, kick: make(chan struct{}, 1)}
}

// Start loads the checkpoint, starts the helper (gRPC server and registration), reads the
// node's cordons (it blocks until the node object is read or ctx ends), publishes the
// ResourceSlice and watches for changes until ctx ends or Stop is called. A driver is
// started once.
func (d *Driver) Start(ctx context.Context) error {
	if d.cfg.NodeName == "" {
		return errors.New("dra: node name is empty")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	d.cancel, d.done = cancel, ctx.Done()
	prep, err := NewPreparer(d.cfg.Prepare, d.cards, d.fail)
	if err != nil {
		cancel(err)
		return err
	}
	d.prep = prep
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.NodeName(d.cfg.NodeName),
		kubeletplugin.KubeClient(d.client),
		// One call at a time: the checkpoint is one file, and claims are few.
		kubeletplugin.Serialize(true),
	}
	if d.cfg.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistrarDir))
	}
	if d.cfg.PluginDataDir != "" {
		opts = append(opts, kubeletplugin.PluginDataDirectoryPath(d.cfg.PluginDataDir))
	}
	helper, err := kubeletplugin.Start(ctx, prep, opts...)
	if err != nil {
		cancel(err)
		return fmt.Errorf("dra: start the kubelet plugin: %w", err)
	}
	d.helper = helper
	sub, unsubscribe := d.cards.Subscribe()
	factory := informers.NewSharedInformerFactoryWithOptions(d.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", d.cfg.NodeName).String()
	}))
	abort := func(err error) error {
		d.Stop() // ends ctx, which the informer's goroutines wait for
		factory.Shutdown()
		unsubscribe()
		return err
	}
	nodes := factory.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    d.nodeChanged,
		UpdateFunc: func(_, obj any) { d.nodeChanged(obj) },
	}); err != nil {
		return abort(fmt.Errorf("dra: watch node %s: %w", d.cfg.NodeName, err))
	}
	factory.Start(ctx.Done())
	// The first slice carries the cordons: a cordoned card is never published untainted.
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return abort(fmt.Errorf("dra: node %s not read: %w", d.cfg.NodeName, context.Cause(ctx)))
	}
	if err := d.Publish(ctx); err != nil {
		return abort(err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer factory.Shutdown()
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub:
			case <-d.kick:
			}
			if err := d.Publish(ctx); err != nil {
				klog.ErrorS(err, "Cannot publish the node's ResourceSlice", "driver", DriverName)
			}
		}
	}()
	klog.InfoS("DRA driver started", "driver", DriverName, "node", d.cfg.NodeName, "stateDir", d.cfg.Prepare.StateDir,
		"claims", len(prep.Prepared()))
	return nil
}

// Stop ends the driver's work and waits for it: the gRPC servers close, the registration
// socket goes away and the ResourceSlice controller stops (the published slice stays, as
// the kubelet's own cleanup or the next start decides). Prepared claims stay in the
// checkpoint.
func (d *Driver) Stop() {
	if d.cancel == nil {
		return
	}
	d.cancel(errors.New("DRA driver stopped"))
	d.wg.Wait()
	d.helper.Stop()
}

// Done is closed when the driver stops, by Stop, by the end of Start's context, or on its
// own after a fatal error (Err).
func (d *Driver) Done() <-chan struct{} { return d.done }

// Err is the error that stopped the driver on its own, if any.
func (d *Driver) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fatal
}

// Preparer is the driver's claim preparer (nil before Start).
func (d *Driver) Preparer() *Preparer { return d.prep }

func (d *Driver) fail(err error) {
	d.mu.Lock()
	if d.fatal == nil {
		d.fatal = err
	}
	d.mu.Unlock()
	d.cancel(err)
}

// Publish hands the node's current model to the helper, which creates or updates the
// ResourceSlice in the background.
func (d *Driver) Publish(ctx context.Context) error {
	inv := d.cards.Inventory()
	reasons := map[string]string{}
	for _, c := range inv.Cards {
		if !c.Healthy {
			reasons[c.UUID] = d.cards.UnhealthyReason(c.UUID)
		}
	}
	d.mu.Lock()
	cordons := d.cordons
	if d.unreadable {
		cordons = everyCardCordoned(inv, UnreadableCordon)
	}
	d.mu.Unlock()
	inv = inv.WithCordons(cordons)
	res := Resources(inv, reasons, Options{Pool: d.cfg.NodeName, MinMemoryMiB: d.cfg.MinMemoryMiB})
	if err := d.helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("dra: publish resources: %w", err)
	}
	klog.V(3).InfoS("Published the node's devices", "driver", DriverName, "cards", len(inv.Cards), "unhealthy", len(reasons))
	return nil
}

// nodeChanged reads the node's cordons and asks for a publication when they changed. A
// cordon annotation that does not decode cordons every card until it is fixed or
// removed: dropping it would put cordoned cards back into service on a typo, and
// keeping the cordons last read would serve every card after a restart.
func (d *Driver) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	var c *api.NodeCordons
	unreadable := false
	if s, ok := node.Annotations[api.AnnotationCordonedCards]; ok {
		var err error
		if c, err = api.DecodeCordons(s); err != nil {
			unreadable = true
		}
		d.mu.Lock()
		first := unreadable && !d.unreadable
		d.mu.Unlock()
		if first {
			klog.ErrorS(err, "The node's card cordons do not decode; every card is published cordoned until the annotation is fixed or removed",
				"node", node.Name, "annotation", api.AnnotationCordonedCards)
		}
	}
	d.mu.Lock()
	same := unreadable == d.unreadable && sameCordons(d.cordons, c)
	d.cordons, d.unreadable = c, unreadable
	d.mu.Unlock()
	if same {
		return
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// UnreadableCordon is the reason of every card's cordon while the node's cordon
// annotation does not decode.
const UnreadableCordon = "the node's cordon annotation does not decode"

// everyCardCordoned is inv's cards, each cordoned for reason.
func everyCardCordoned(inv *api.NodeInventory, reason string) *api.NodeCordons {
	c := &api.NodeCordons{Version: api.CordonsVersion, Cards: make(map[string]api.CardCordon, len(inv.Cards))}
	for _, card := range inv.Cards {
		c.Cards[card.UUID] = api.CardCordon{Reason: reason}
	}
	return c
}

func sameCordons(a, b *api.NodeCordons) bool {
	var x, y map[string]api.CardCordon
	if a != nil {
		x = a.Cards
	}
	if b != nil {
		y = b.Cards
	}
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w.Reason != v.Reason {
			return false
		}
	}
	return true
}

// StateDir is where the driver keeps its checkpoint and claim directories inside the
// agent's state directory.
func StateDir(agentStateDir string) string { return filepath.Join(agentStateDir, "dra") }
