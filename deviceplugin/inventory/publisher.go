// Package inventory publishes the node's cards on the Node object: the versioned
// inventory annotation, each card's CUDA context reserve, the MIG layout of cards
// in MIG mode and the card API the agent serves (tessera.io/card-api) when something changes,
// the heartbeat annotation on a timer, and optionally the HAMi/Volcano registration
// annotations.
package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
)

// volcanoHandshakeLayout is the time layout of HAMi's "Reported_<time>" handshake.
const volcanoHandshakeLayout = "2006.01.02 15:04:05"

// Options configure the publisher.
type Options struct {
	Node      string
	Heartbeat time.Duration
	// VolcanoCompat also writes volcano.sh/node-vgpu-register and its handshake, so
	// Volcano's own deviceshare (or a Tessera scheduler reading that format) sees the node.
	VolcanoCompat bool
	MinBackoff    time.Duration
	MaxBackoff    time.Duration
	// CardAPI, when set, is written as tessera.io/card-api: how the agent offers the
	// cards to the kubelet (device-plugin or dra). Empty leaves the annotation as it is.
	CardAPI string
	// Observe, when set, is given the Node the API server returns for each write (the
	// coexistence guard reads other plugins' resources from it instead of a GET).
	Observe func(*corev1.Node)
	// MIGRepartition writes tessera.io/mig-repartition: "true", telling the scheduler
	// that this agent applies MIG plans; without it the annotation is removed.
	MIGRepartition bool
}

// Observer is told the outcome of every write; the metrics package implements it.
type Observer interface {
	ObservePublish(err error, d time.Duration)
}

// Publisher writes the node annotations.
type Publisher struct {
	client   kubernetes.Interface
	reg      *cards.Registry
	opts     Options
	observer Observer
	now      func() time.Time
}

// New returns a publisher; observer may be nil.
func New(client kubernetes.Interface, reg *cards.Registry, opts Options, observer Observer) *Publisher {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = 30 * time.Second
	}
	return &Publisher{client: client, reg: reg, opts: opts, observer: observer, now: time.Now}
}

// Run publishes at once, after every health change and on every heartbeat, until ctx
// ends. A failed write is logged and retried with doubling backoff; the heartbeat
// interval does not wait for a failing write.
func (p *Publisher) Run(ctx context.Context) {
	changes, cancel := p.reg.Subscribe()
	defer cancel()
	beat := time.NewTicker(p.opts.Heartbeat)
	defer beat.Stop()
	backoff, failures := p.opts.MinBackoff, 0
	var retry <-chan time.Time
	for {
		if err := p.Publish(ctx); err != nil {
			failures++
			klog.ErrorS(err, "Publishing the node inventory failed; retrying", "node", p.opts.Node, "attempt", failures, "in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, p.opts.MaxBackoff)
		} else {
			if failures > 0 {
				klog.InfoS("Publishing the node inventory works again", "node", p.opts.Node, "failedAttempts", failures)
			}
			backoff, failures, retry = p.opts.MinBackoff, 0, nil
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-beat.C:
		case <-retry:
		}
	}
}

// Publish writes the annotations once.
func (p *Publisher) Publish(ctx context.Context) error {
	start := time.Now()
	body, err := p.Patch()
	if err == nil {
		var node *corev1.Node
		node, err = p.client.CoreV1().Nodes().Patch(ctx, p.opts.Node, types.MergePatchType, body, metav1.PatchOptions{})
		if err != nil {
			err = fmt.Errorf("patch node %s: %w", p.opts.Node, err)
		} else if p.opts.Observe != nil {
			p.opts.Observe(node)
		}
	}
	if p.observer != nil {
		p.observer.ObservePublish(err, time.Since(start))
	}
	if err == nil {
		klog.V(4).InfoS("Published node inventory", "node", p.opts.Node)
	}
	return err
}

// Patch is the JSON merge patch of the node's annotations.
func (p *Publisher) Patch() ([]byte, error) {
	inv := p.reg.Inventory()
	enc, err := api.EncodeInventory(inv)
	if err != nil {
		return nil, fmt.Errorf("encode inventory: %w", err)
	}
	now := p.now()
	// Values are strings, or nil to remove the key (a JSON merge patch's null).
	ann := map[string]any{
		api.AnnotationInventory: enc,
		api.AnnotationHeartbeat: now.UTC().Format(time.RFC3339),
		// The reserves travel beside the inventory, not in it: a scheduler of the
		// previous release decodes the inventory strictly and never reads this key.
		api.AnnotationContextReserve: nil,
	}
	if p.opts.CardAPI != "" {
		ann[api.AnnotationCardAPI] = p.opts.CardAPI
	}
	if r := inv.ContextReserve(); r != nil {
		if ann[api.AnnotationContextReserve], err = api.EncodeContextReserve(r); err != nil {
			return nil, fmt.Errorf("encode %s: %w", api.AnnotationContextReserve, err)
		}
	}
	// MIG layouts travel beside the inventory for the same reason. A layout that does
	// not encode (an old driver's MIG UUID form, say) is left off with an error in the
	// log: it must not keep the cards themselves off the node.
	ann[api.AnnotationMIGInstances] = nil
	if m := inv.MIGInstances(); m != nil {
		if enc, err := api.EncodeMIGInstances(m); err != nil {
			klog.ErrorS(err, "Leaving the MIG layout off the node", "node", p.opts.Node, "annotation", api.AnnotationMIGInstances)
		} else {
			ann[api.AnnotationMIGInstances] = enc
		}
	}
	ann[api.AnnotationMIGRepartition] = nil
	if p.opts.MIGRepartition {
		ann[api.AnnotationMIGRepartition] = "true"
	}
	if p.opts.VolcanoCompat {
		vc := make([]api.VolcanoCard, len(inv.Cards))
		for i, c := range inv.Cards {
			vc[i] = api.VolcanoCard{UUID: c.UUID, Count: c.Shares, MemoryMiB: c.MemoryMiB, Type: c.Model, Healthy: c.Healthy}
		}
		reg, err := api.EncodeVolcanoNodeRegister(vc)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", api.VolcanoNodeRegister, err)
		}
		ann[api.VolcanoNodeRegister] = reg
		ann[api.VolcanoNodeHandshake] = "Reported_" + now.Format(volcanoHandshakeLayout)
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return nil, fmt.Errorf("encode node patch: %w", err)
	}
	return b, nil
}
