package vgpu

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/plugins/engine"
)

// Scheduler metrics, served on vc-scheduler's --listen-address with Volcano's own.
// Names and labels are documented in plugins/vgpu/README.md and docs/reference.md.
var (
	metricCardMemory = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "card_allocated_memory_mib",
		Help: "Card memory assigned to pods, in MiB, as the last session saw it.",
	}, []string{"node", "card", "uuid"})
	metricCardCapacity = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "card_memory_mib",
		Help: "Schedulable card memory (physical times oversubscription), in MiB.",
	}, []string{"node", "card", "uuid"})
	metricCardCores = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "card_allocated_cores_percent",
		Help: "Percent of the card's SMs assigned to pods.",
	}, []string{"node", "card", "uuid"})
	metricCardTenants = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "card_tenants",
		Help: "Containers sharing the card.",
	}, []string{"node", "card", "uuid"})
	metricQueueShare = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "queue_vgpu_share",
		Help: "Each queue's card memory (MiB) and cores (card percent) at the end of the last session: deserved, allocated and requested.",
	}, []string{"queue", "resource", "kind"})
	metricPending = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "vgpu_tasks_pending",
		Help: "vGPU tasks left pending by the last session, by the reason most nodes gave.",
	}, []string{"reason"})
	metricOpen = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "session_open_seconds",
		Help:    "Time the vgpu plugin takes to open a session (reading inventories and bookings).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	metricPluginSeconds = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tessera", Subsystem: "scheduler", Name: "plugin_seconds_total",
		Help: "CPU time spent in the vgpu plugin's hooks, summed over parallel workers.",
	}, []string{"hook"})
)

// Pending reasons that are not an engine.Reason.
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

func refusalOf(ferr *engine.FitError) string { return string(ferr.Dominant()) }

// publishMetrics records the session's card usage and pending vGPU tasks.
func (p *vgpuPlugin) publishMetrics(ssn *framework.Session) {
	for _, v := range []*prometheus.GaugeVec{metricCardMemory, metricCardCapacity, metricCardCores, metricCardTenants, metricPending, metricQueueShare} {
		v.Reset()
	}
	p.ledger.mu.RLock()
	for name, n := range p.ledger.nodes {
		for _, c := range n.Cards {
			idx := strconv.Itoa(c.Index)
			metricCardMemory.WithLabelValues(name, idx, c.UUID).Set(float64(c.Used.MemoryMiB))
			metricCardCapacity.WithLabelValues(name, idx, c.UUID).Set(float64(c.CapacityMiB))
			metricCardCores.WithLabelValues(name, idx, c.UUID).Set(float64(c.Used.Cores))
			metricCardTenants.WithLabelValues(name, idx, c.UUID).Set(float64(c.Used.Tenants))
		}
	}
	p.ledger.mu.RUnlock()
	if p.shares != nil {
		p.shares.publish()
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
			case reason == pendingNotTried && len(job.JobFitErrors) > 5 && job.JobFitErrors[:5] == "vgpu:":
				reason = pendingGang
			}
			metricPending.WithLabelValues(reason).Inc()
		}
	}
}

// The hooks' counters, resolved once: predicates run hundreds of thousands of times
// a session.
var hookSeconds = map[string]prometheus.Counter{
	"predicate":  metricPluginSeconds.WithLabelValues("predicate"),
	"node_order": metricPluginSeconds.WithLabelValues("node_order"),
	"allocate":   metricPluginSeconds.WithLabelValues("allocate"),
}

// timed adds the time since start to a hook's counter.
func timed(hook string, start time.Time) {
	hookSeconds[hook].Add(time.Since(start).Seconds())
}
