package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/mig"
	planner "github.com/tessera-gpu/tessera/placement/mig"
)

// Dynamic MIG, the agent's half (with migRepartition on): the agent watches its own
// Node for the scheduler's plan (api.AnnotationMIGPlan), applies each new one to its
// card through deviceplugin/mig, one at a time, and answers with
// api.AnnotationMIGPlanStatus in the same write as the card's new layout
// (api.AnnotationMIGInstances), so that the scheduler never sees the answer beside the
// old layout. The card's slots follow its instance count.

// migStatusAttempts is how many times the answer is written before giving up (the
// plan then expires on the scheduler's side and the layout is published anyway).
const migStatusAttempts = 3

// migPlans applies the node's MIG plans.
type migPlans struct {
	client  kubernetes.Interface
	node    string
	devices map[string]nvml.Device
	reg     *cards.Registry
	// shares is sharesPerCard: a card in MIG mode offers at least that many slots, one per
	// instance its profile table allows and one per instance it holds.
	shares   int
	outcomes *prometheus.CounterVec
	now      func() time.Time
	backoff  time.Duration
	// handled is the ID of the last plan answered, and bad the last value that did not
	// decode (logged once); only the Run goroutine touches them.
	handled string
	bad     string
}

func newMIGPlans(client kubernetes.Interface, node string, devices map[string]nvml.Device, reg *cards.Registry, shares int,
	promReg prometheus.Registerer) *migPlans {
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tessera_mig_plans_total",
		Help: "MIG plans this agent answered, by outcome (applied, refused-busy, refused-invalid, failed-rolled-back, failed-rollback-failed)."},
		[]string{"outcome"})
	if promReg != nil {
		promReg.MustRegister(outcomes)
	}
	return &migPlans{client: client, node: node, devices: devices, reg: reg, shares: shares, outcomes: outcomes,
		now: time.Now, backoff: 500 * time.Millisecond}
}

// Run watches the agent's Node and handles each plan until ctx ends.
func (m *migPlans) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(m.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", m.node).String()
	}))
	nodes := factory.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default: // a read is already due; it sees the latest Node
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke,
		UpdateFunc: func(_, n any) { poke(n) }}); err != nil {
		klog.ErrorS(err, "Cannot watch the node for MIG plans", "node", m.node)
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return
	}
	klog.InfoS("Applying the scheduler's MIG plans for this node's idle cards", "node", m.node)
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		node, err := nodes.Lister().Get(m.node)
		if err != nil {
			continue
		}
		m.handle(ctx, node)
	}
}

// handle answers the node's plan unless it has been answered already.
func (m *migPlans) handle(ctx context.Context, node *corev1.Node) {
	v, ok := node.Annotations[api.AnnotationMIGPlan]
	if !ok {
		return
	}
	plan, err := api.DecodeMIGPlan(v)
	if err != nil {
		if v != m.bad {
			m.bad = v
			klog.ErrorS(err, "Ignoring a MIG plan this agent cannot read", "node", m.node)
		}
		return
	}
	if plan.ID == m.handled {
		return
	}
	if s, err := api.DecodeMIGPlanStatus(node.Annotations[api.AnnotationMIGPlanStatus]); err == nil && s.ID == plan.ID {
		m.handled = plan.ID // answered before this agent restarted
		return
	}
	m.handled = plan.ID
	status := m.apply(plan)
	m.outcomes.WithLabelValues(status.Outcome).Inc()
	log := []any{"node", m.node, "plan", plan.ID, "card", plan.Card, "profiles", plan.Profiles, "outcome", status.Outcome}
	if status.Outcome == api.MIGPlanApplied {
		klog.InfoS("Applied a MIG plan", log...)
	} else {
		klog.InfoS("Did not apply a MIG plan", append(log, "reason", status.Message)...)
	}
	m.answer(ctx, status)
}

// apply carries the plan out and says how it went. Whatever happened, the card's
// layout is read again into the registry: a rollback recreates instances with new
// MIG UUIDs.
func (m *migPlans) apply(plan *api.MIGPlan) *api.MIGPlanStatus {
	st := &api.MIGPlanStatus{ID: plan.ID, Card: plan.Card}
	refuse := func(outcome string, err error) *api.MIGPlanStatus {
		st.Outcome, st.Message = outcome, truncate(err.Error(), api.MaxMIGPlanMessageBytes)
		return st
	}
	dev, ok := m.devices[plan.Card]
	if !ok {
		return refuse(api.MIGPlanRefusedInvalid, fmt.Errorf("card %s is not on node %s", plan.Card, m.node))
	}
	card, err := mig.Open(dev)
	if err != nil {
		return refuse(api.MIGPlanRefusedInvalid, err)
	}
	table, err := card.Table()
	if err != nil {
		return refuse(api.MIGPlanRefusedInvalid, err)
	}
	current, err := card.Geometry()
	if err != nil {
		return refuse(api.MIGPlanRefusedInvalid, err)
	}
	layout, err := planner.Plan(table, current, plan.Profiles)
	if err != nil {
		return refuse(api.MIGPlanRefusedInvalid, fmt.Errorf("card %s: %w", plan.Card, err))
	}
	err = card.Apply(layout)
	defer m.refresh(plan.Card, dev)
	switch {
	case err == nil:
		st.Outcome, st.Message = api.MIGPlanApplied, "layout "+layout.String()
		return st
	case errors.Is(err, mig.ErrBusy):
		return refuse(api.MIGPlanRefusedBusy, err)
	case errors.Is(err, mig.ErrRollback):
		return refuse(api.MIGPlanFailedRollbackFailed, err)
	case errors.Is(err, planner.ErrInvalid):
		return refuse(api.MIGPlanRefusedInvalid, err)
	}
	return refuse(api.MIGPlanFailedRolledBack, err)
}

// refresh reads the card's MIG devices into the registry, which tells the publisher
// and the kubelet server.
func (m *migPlans) refresh(uuid string, dev nvml.Device) {
	c, ok := m.reg.Card(uuid)
	if !ok {
		return
	}
	devs, err := discovery.ReadMIGDevices(dev, uuid, uint64(c.MemoryMiB))
	if err != nil {
		klog.ErrorS(err, "Cannot read the card's MIG layout after a plan", "node", m.node, "card", uuid)
		return
	}
	instances := make([]api.MIGInstance, len(devs))
	for i, d := range devs {
		instances[i] = d.MIGInstance
	}
	// The card already offers a slot for every instance its profile table allows
	// (discovery); a plan only adds slots, should NVML ever list more instances.
	shares := max(c.Shares, m.shares, len(instances))
	if c.Shares != shares {
		klog.InfoS("The card's slot count follows its MIG instances", "node", m.node, "card", uuid, "from", c.Shares, "to", shares)
	}
	m.reg.SetMIGLayout(uuid, instances, shares)
}

// answer writes the plan's status and the node's MIG layout in one patch.
func (m *migPlans) answer(ctx context.Context, st *api.MIGPlanStatus) {
	st.Time = m.now().UTC().Format(time.RFC3339)
	enc, err := api.EncodeMIGPlanStatus(st)
	if err != nil {
		klog.ErrorS(err, "Cannot encode the MIG plan's status", "node", m.node, "plan", st.ID)
		return
	}
	ann := map[string]any{api.AnnotationMIGPlanStatus: enc, api.AnnotationMIGInstances: nil}
	if layout := m.reg.Inventory().MIGInstances(); layout != nil {
		if ann[api.AnnotationMIGInstances], err = api.EncodeMIGInstances(layout); err != nil {
			// Left as it is: the publisher logs the same error on its next write.
			delete(ann, api.AnnotationMIGInstances)
		}
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		klog.ErrorS(err, "Cannot encode the MIG plan's status patch", "node", m.node)
		return
	}
	for attempt := 1; ; attempt++ {
		_, err = m.client.CoreV1().Nodes().Patch(ctx, m.node, types.MergePatchType, body, metav1.PatchOptions{})
		if err == nil || attempt == migStatusAttempts || ctx.Err() != nil {
			break
		}
		time.Sleep(m.backoff * time.Duration(attempt))
	}
	if err != nil {
		klog.ErrorS(err, "Cannot write the MIG plan's status; the scheduler's plan expires instead", "node", m.node, "plan", st.ID)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
