package vgpu

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/placement"
)

// metrics are the scheduler's Prometheus metrics, owned by its Scheduler and
// registered where the Scheduler was told (vc-scheduler: Prometheus's default
// registerer, which Volcano serves on --listen-address beside its own). Names and
// labels are documented in plugins/vgpu/README.md and docs/reference.md.
type metrics struct {
	cardMemory, cardCapacity, cardCores, cardTenants *prometheus.GaugeVec
	queueShare, pending                              *prometheus.GaugeVec
	open                                             prometheus.Histogram
	pluginSeconds                                    *prometheus.CounterVec
	// hooks are pluginSeconds' counters, resolved once: predicates run hundreds of
	// thousands of times a session.
	hooks map[string]prometheus.Counter
}

// newMetrics creates the metrics on reg; a nil reg registers them nowhere (tests).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	card := []string{"node", "card", "uuid"}
	m := &metrics{
		cardMemory: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_allocated_memory_mib",
			Help: "Card memory assigned to pods, in MiB, as the last session saw it.",
		}, card),
		cardCapacity: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_memory_mib",
			Help: "Schedulable card memory (physical times oversubscription), in MiB.",
		}, card),
		cardCores: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_allocated_cores_percent",
			Help: "Percent of the card's SMs assigned to pods.",
		}, card),
		cardTenants: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "card_tenants",
			Help: "Containers sharing the card.",
		}, card),
		queueShare: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "queue_vgpu_share",
			Help: "Each queue's card memory (MiB) and cores (card percent) at the end of the last session: deserved, allocated and requested.",
		}, []string{"queue", "resource", "kind"}),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "vgpu_tasks_pending",
			Help: "vGPU tasks left pending by the last session, by the reason most nodes gave.",
		}, []string{"reason"}),
		open: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "session_open_seconds",
			Help:    "Time the vgpu plugin takes to open a session (reading inventories and bookings).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		pluginSeconds: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tessera", Subsystem: "scheduler", Name: "plugin_seconds_total",
			Help: "CPU time spent in the vgpu plugin's hooks, summed over parallel workers.",
		}, []string{"hook"}),
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

// Pending reasons that are not an placement.Reason.
const (
	pendingInvalid     = "invalid request"
	pendingNoInventory = "no usable vGPU inventory"
	pendingGang        = "gang does not fit"
	pendingNotTried    = "not tried"
	pendingQueueShare  = "queue at its share"
)

// refusals counts, per task, the reasons nodes gave in this session.
type refusals struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *refusals) add(reason string) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[reason]++
	r.mu.Unlock()
}

func (r *refusals) dominant() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	best, n := pendingNotTried, 0
	for reason, c := range r.counts {
		if c > n || c == n && reason < best {
			best, n = reason, c
		}
	}
	return best
}

func refusalOf(ferr *placement.FitError) string { return string(ferr.Dominant()) }

// refusal is a fit error as the plugin reports it, under the plugin's name like
// every reason it gives.
func refusal(ferr *placement.FitError) string { return PluginName + ": " + ferr.Error() }

// refuseGang reports why the plugin keeps a job's gang back (on the PodGroup, where
// the gang plugin shows it) and remembers the refusal for the pending metric.
func (p *vgpuPlugin) refuseGang(job *vapi.JobInfo, msg string) {
	job.JobFitErrors = msg
	p.gangsRefused.Store(job.UID, true)
}

// refusedGang reports whether the plugin kept the job's gang back this session.
func (p *vgpuPlugin) refusedGang(job vapi.JobID) bool {
	_, ok := p.gangsRefused.Load(job)
	return ok
}

// publishMetrics records the session's card usage and pending vGPU tasks.
func (p *vgpuPlugin) publishMetrics(ssn *framework.Session) {
	m := p.metrics
	for _, v := range []*prometheus.GaugeVec{m.cardMemory, m.cardCapacity, m.cardCores, m.cardTenants, m.pending, m.queueShare} {
		v.Reset()
	}
	p.ledger.eachCard(func(name string, c *placement.CardState) {
		idx := strconv.Itoa(c.Index)
		m.cardMemory.WithLabelValues(name, idx, c.UUID).Set(float64(c.Used.MemoryMiB))
		m.cardCapacity.WithLabelValues(name, idx, c.UUID).Set(float64(c.CapacityMiB))
		m.cardCores.WithLabelValues(name, idx, c.UUID).Set(float64(c.Used.Cores))
		m.cardTenants.WithLabelValues(name, idx, c.UUID).Set(float64(c.Used.Tenants))
	})
	if p.shares != nil {
		p.shares.publish(m.queueShare)
	}
	for _, job := range ssn.Jobs {
		for _, task := range job.TaskStatusIndex[vapi.Pending] {
			tr := p.request(task)
			if tr == nil {
				continue
			}
			reason := tr.refused.dominant()
			switch {
			case tr.err != nil:
				reason = pendingInvalid
			case reason == pendingNotTried && p.refusedGang(job.UID):
				reason = pendingGang
			}
			m.pending.WithLabelValues(reason).Inc()
		}
	}
}
