package vgpu

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/placement/fairshare"
	"github.com/tessera-gpu/tessera/plugins/vgpu/dracost"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// metrics are the scheduler's Prometheus metrics, owned by its Scheduler and
// registered where the Scheduler was told (vc-scheduler: Prometheus's default
// registerer, which Volcano serves on --listen-address beside its own). Names and
// labels are documented in plugins/vgpu/README.md and docs/reference.md.
type metrics struct {
	cardMemory, cardCapacity, cardCores, cardTenants *prometheus.GaugeVec
	queueMemory, queueCards, pending                 *prometheus.GaugeVec
	// queueMIG is each queue's MIG slices, for queues with MIG pods only.
	queueMIG *prometheus.GaugeVec
	// outOfService counts the cards that take no new task, by why: the agent's
	// health check or an administrator's cordon.
	outOfService    *prometheus.GaugeVec
	open, placement prometheus.Histogram
	pluginSeconds   *prometheus.CounterVec
	// pipelinesRefused counts tasks Volcano pipelined onto cards that would not take them.
	pipelinesRefused prometheus.Counter
	// notInCache is the last session's bound vGPU pods missing from Volcano's cache.
	notInCache prometheus.Gauge
	// claimsSkipped is the last session's DRA claim results left out of the card
	// book, by reason. A gauge, not a counter: every session reads every claim again,
	// so one hostile claim would otherwise add one per session, and its rate would
	// measure sessions, not claims.
	claimsSkipped *prometheus.GaugeVec
	// hooks are pluginSeconds' counters, resolved once: predicates run hundreds of
	// thousands of times a session.
	hooks map[string]prometheus.Counter
	// cards holds each card's four gauges between sessions: resolving them again
	// every session (a Reset and WithLabelValues per card) allocated about 1 KiB per
	// card per session, a few GB over a 1,000-node run.
	cards cardSeries
}

// cardSeries are the card gauges of the cards the last session saw.
type cardSeries struct {
	// mu guards epoch and byKey.
	mu    sync.Mutex
	epoch uint64
	byKey map[cardKey]*cardGauges
}

type cardKey struct {
	node, uuid string
	index      int
}

type cardGauges struct {
	memory, capacity, cores, tenants prometheus.Gauge
	epoch                            uint64
}

// cardLabels are the labels of the scheduler's card metrics: the same card labels
// (uuid, index) as the node agent's, so the two join.
var cardLabels = []string{"node", "index", "uuid"}

// mib is the bytes of a MiB: assignments count memory in MiB, metrics in bytes.
const mib = 1 << 20

// newMetrics creates the metrics on reg; a nil reg registers them nowhere (tests).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		cardMemory: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_allocated_memory_bytes",
			Help: "Card memory assigned to pods, as the last session saw it.",
		}, cardLabels),
		cardCapacity: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_memory_bytes",
			Help: "Schedulable card memory (physical times oversubscription).",
		}, cardLabels),
		cardCores: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_allocated_cores_ratio",
			Help: "Share of the card's SMs assigned to pods (0-1).",
		}, cardLabels),
		cardTenants: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_tenants",
			Help: "Containers sharing the card.",
		}, cardLabels),
		queueMemory: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "queue_vgpu_memory_bytes",
			Help: "Each queue's card memory at the end of the last session: deserved, allocated and requested (kind).",
		}, []string{"queue", "kind"}),
		queueCards: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "queue_vgpu_cards",
			Help: "Each queue's card cores in whole cards (1 = all SMs of one card) at the end of the last session: deserved, allocated and requested (kind).",
		}, []string{"queue", "kind"}),
		queueMIG: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "queue_mig_slices",
			Help: "Each queue's MIG compute slices (a 3g instance is 3) at the end of the last session: deserved, allocated and requested (kind); only queues that hold or ask for MIG instances.",
		}, []string{"queue", "kind"}),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "vgpu_tasks_pending",
			Help: "vGPU tasks left pending by the last session, by the reason most nodes gave.",
		}, []string{"reason"}),
		outOfService: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "cards_out_of_service",
			Help: "Cards of usable nodes that take no new vGPU task, by reason: unhealthy (the node agent) or cordoned (an administrator); a card both counts in each.",
		}, []string{"reason"}),
		open: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "session_open_seconds",
			Help:    "Time the vgpu plugin takes to open a session (reading inventories and bookings).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		placement: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "vgpu_placement_seconds",
			Help:    "Time from a vGPU pod's creation to the session that booked its cards (a booking a gang rolls back counts too).",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 16),
		}),
		pluginSeconds: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "plugin_seconds_total",
			Help: "CPU time spent in the vgpu plugin's hooks, summed over parallel workers.",
		}, []string{"hook"}),
		pipelinesRefused: f.NewCounter(prometheus.CounterOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "vgpu_pipelines_refused_total",
			Help: "vGPU tasks preempt, reclaim or allocate pipelined onto a node whose cards would not take them once its evicted pods are gone (Volcano rolls each back; wasted work).",
		}),
		notInCache: f.NewGauge(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "vgpu_pods_not_in_cache",
			Help: "Bound vGPU pods the scheduler's informer holds and the last session did not (Volcano's cache still loading them); their nodes took no vGPU task and nothing was evicted.",
		}),
		claimsSkipped: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "dra_claim_results_skipped",
			Help: "Allocation results of DRA claims (driver vgpu.tessera.io) the last session left out of the card book and the queue shares, by reason: unknown node, unknown device, admin access, card twice, bad capacity.",
		}, []string{"reason"}),
	}
	m.hooks = map[string]prometheus.Counter{}
	for _, hook := range []string{"predicate", "node_order", "allocate"} {
		m.hooks[hook] = m.pluginSeconds.WithLabelValues(hook)
	}
	return m
}

// timed adds the time since start to a hook's counter.
func (m *metrics) timed(hook string, start time.Time) {
	m.hooks[hook].Add(time.Since(start).Seconds())
}

// placed records how long a vGPU pod waited for its cards.
func (m *metrics) placed(created, now time.Time) {
	if !created.IsZero() && !now.Before(created) {
		m.placement.Observe(now.Sub(created).Seconds())
	}
}

// publishCards sets the gauges of every card each visits, and drops the series of
// cards no longer seen (a node gone, a card replaced).
func (m *metrics) publishCards(each func(fn func(node string, c *placement.CardState))) {
	cs := &m.cards
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.byKey == nil {
		cs.byKey = map[cardKey]*cardGauges{}
	}
	cs.epoch++
	each(func(node string, c *placement.CardState) {
		k := cardKey{node: node, uuid: c.UUID, index: c.Index}
		g := cs.byKey[k]
		if g == nil {
			idx := strconv.Itoa(c.Index)
			g = &cardGauges{memory: m.cardMemory.WithLabelValues(node, idx, c.UUID), capacity: m.cardCapacity.WithLabelValues(node, idx, c.UUID),
				cores: m.cardCores.WithLabelValues(node, idx, c.UUID), tenants: m.cardTenants.WithLabelValues(node, idx, c.UUID)}
			cs.byKey[k] = g
		}
		g.epoch = cs.epoch
		g.memory.Set(float64(c.Used.MemoryMiB) * mib)
		g.capacity.Set(float64(c.CapacityMiB) * mib)
		g.cores.Set(float64(c.Used.Cores) / 100)
		g.tenants.Set(float64(c.Used.Tenants))
	})
	for k, g := range cs.byKey {
		if g.epoch == cs.epoch {
			continue
		}
		idx := strconv.Itoa(k.index)
		for _, v := range []*prometheus.GaugeVec{m.cardMemory, m.cardCapacity, m.cardCores, m.cardTenants} {
			v.DeleteLabelValues(k.node, idx, k.uuid)
		}
		delete(cs.byKey, k)
	}
}

// Reasons of tessera_scheduler_cards_out_of_service.
const (
	outUnhealthy = "unhealthy"
	outCordoned  = "cordoned"
)

// publishOutOfService counts the unhealthy and the cordoned cards each visits; both
// series are always set, so that an alert can compare them with zero.
func (m *metrics) publishOutOfService(each func(fn func(node string, c *placement.CardState))) {
	counts := outOfServiceCounts(each)
	for _, reason := range []string{outUnhealthy, outCordoned} {
		m.outOfService.WithLabelValues(reason).Set(float64(counts[reason]))
	}
}

// outOfServiceCounts is the count of cards per reason of the out-of-service gauge.
func outOfServiceCounts(each func(fn func(node string, c *placement.CardState))) map[string]int {
	counts := map[string]int{}
	each(func(_ string, c *placement.CardState) {
		if !c.Healthy {
			counts[outUnhealthy]++
		}
		if c.Cordon != nil {
			counts[outCordoned]++
		}
	})
	return counts
}

// publishClaimsSkipped sets the skipped claim results per reason. The five reasons
// of dracost are always set, zero too, so that an alert can compare them with zero;
// the series of any other reason lives as long as the sessions that count it.
func (m *metrics) publishClaimsSkipped(skipped map[string]int) {
	m.claimsSkipped.Reset()
	for _, reason := range []string{dracost.ReasonUnknownNode, dracost.ReasonUnknownDevice, dracost.ReasonAdminAccess,
		dracost.ReasonCardTwice, dracost.ReasonBadCapacity} {
		m.claimsSkipped.WithLabelValues(reason).Set(0)
	}
	for reason, n := range skipped {
		m.claimsSkipped.WithLabelValues(reason).Set(float64(n))
	}
}

// publishShares records every queue's share in base units: memory in bytes, cores in
// whole cards; and MIG slices for each queue that holds or asks for MIG instances.
func (m *metrics) publishShares(standings []shares.Standing) {
	m.queueMIG.Reset()
	for _, q := range standings {
		if q.Allocated.MIGSlices > 0 || q.Requested.MIGSlices > 0 {
			for kind, a := range map[string]fairshare.Amount{"deserved": q.Deserved, "allocated": q.Allocated, "request": q.Requested} {
				m.queueMIG.WithLabelValues(q.Name, kind).Set(a.MIGSlices)
			}
		}
		for kind, a := range map[string]fairshare.Amount{"deserved": q.Deserved, "allocated": q.Allocated, "request": q.Requested} {
			m.queueMemory.WithLabelValues(q.Name, kind).Set(a.MemoryMiB * mib)
			m.queueCards.WithLabelValues(q.Name, kind).Set(a.Cores / 100)
		}
	}
}
