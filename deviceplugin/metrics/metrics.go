// Package metrics exposes the node agent's Prometheus metrics. Names are documented in
// docs/device-plugin.md and docs/reference.md. They follow Prometheus's conventions: base
// units (bytes, ratios 0-1, seconds), a node label on every series, and the same card
// labels (uuid, index) as the scheduler's metrics. Card and container gauges are computed
// at scrape time from the registry, the handoff records and the containers' shared
// regions, so they never drift from what the agent serves and what the containers use.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

const namespace = "tessera"

// Metrics holds the event counters and the scrape-time collector.
type Metrics struct {
	calls         *prometheus.CounterVec
	callSeconds   *prometheus.HistogramVec
	publishes     *prometheus.CounterVec
	publishSecond prometheus.Histogram
	lastPublish   prometheus.Gauge
	registrations prometheus.Counter
	refusals      *prometheus.CounterVec
	regionErrors  *prometheus.CounterVec
	now           func() time.Time
}

// Sources are read on every scrape.
type Sources struct {
	// Node is the node's name: every series carries it as the node label, so that
	// namespace/pod/container series of one node never collide with another's.
	Node  string
	Cards *cards.Registry
	// Store lists the containers the agent serves: the handoff records (*records.Store)
	// on a device-plugin node, the prepared claims' records (dra.ClaimSource) on a DRA
	// node.
	Store RecordSource
	// Pods tells which pods are bound to the node (Exists) and their queue (Get).
	Pods handoff.PodLookup
	// ProcRoot is the procfs that shows the containers' processes (default /proc); whether
	// it does is checked at start (usage.SeesHostPIDs).
	ProcRoot string
	// KubeletPodsDir is the kubelet's pods directory as the agent sees it: a container's
	// region is read from its pod's region volume there (api.RegionVolumeName).
	KubeletPodsDir string
	// RegionReadBudget bounds the time one scrape spends reading all containers' regions
	// (default DefaultRegionReadBudget); containers not read by then are skipped.
	RegionReadBudget time.Duration
}

// RecordSource lists, by pod UID, the records of the containers whose limits and regions
// the metrics report. A record with RegionVolume set names its region file on its pod's
// region volume (api.RegionFile of its Container).
type RecordSource interface {
	Records() (map[string][]*records.Record, error)
}

var _ RecordSource = (*records.Store)(nil)

// DefaultRegionReadBudget is a scrape's time for reading regions: well inside
// Prometheus's default scrape timeout (10 s).
const DefaultRegionReadBudget = 2 * time.Second

// Reasons of tessera_agent_region_read_errors_total: a fixed set, never a tenant's string.
const (
	ReasonNotRegularFile = "not_regular_file" // a FIFO, socket, device, directory or symbolic link
	ReasonSize           = "size"             // not the region's size (resized, or shrank while read)
	ReasonLayout         = "layout"           // another vgpu-core layout version
	ReasonTimeout        = "timeout"          // not read within the scrape's budget
	ReasonError          = "error"            // any other error (permission, I/O)
)

// New registers every metric on reg.
func New(reg prometheus.Registerer, src Sources) *Metrics {
	if src.ProcRoot == "" {
		src.ProcRoot = "/proc"
	}
	node := prometheus.Labels{"node": src.Node}
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "kubelet_calls_total", ConstLabels: node,
			Help: "Kubelet device plugin calls by call and result (ok or refused)."}, []string{"call", "result"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "kubelet_call_duration_seconds", ConstLabels: node,
			Help: "Time to answer a kubelet device plugin call.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"call"}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "inventory_publish_total", ConstLabels: node,
			Help: "Node inventory writes by result (ok or error)."}, []string{"result"}),
		publishSecond: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "inventory_publish_duration_seconds", ConstLabels: node,
			Help: "Time to write the node inventory.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 12)}),
		lastPublish: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "inventory_last_publish_timestamp_seconds", ConstLabels: node,
			Help: "When the node inventory (and its heartbeat) was last written successfully, Unix time."}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "kubelet_registrations_total", ConstLabels: node,
			Help: "Successful registrations with the kubelet."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "assignment_refusals_total", ConstLabels: node,
			Help: "Pod card assignments the agent would not honour, by reason: unsigned, unknown_key, bad_signature, exceeds_request, wrong_node, changed (after Allocate), mig (the node's MIG instances disagree), malformed, no_assignment, other."}, []string{"reason"}),
		regionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "agent_region_read_errors_total", ConstLabels: node,
			Help: "Containers' shared regions the agent refused or could not read at a scrape, by reason: not_regular_file, size, layout, timeout, error."},
			[]string{"reason"}),
		now: time.Now,
	}
	for _, r := range []string{ReasonNotRegularFile, ReasonSize, ReasonLayout, ReasonTimeout, ReasonError} {
		m.regionErrors.WithLabelValues(r)
	}
	reg.MustRegister(m.calls, m.callSeconds, m.publishes, m.publishSecond, m.lastPublish, m.registrations, m.refusals, m.regionErrors,
		newCollector(src, m.regionErrors))
	return m
}

// ObserveCall implements handoff.Observer.
func (m *Metrics) ObserveCall(call string, err error, d time.Duration) {
	m.calls.WithLabelValues(call, result(err, "refused")).Inc()
	m.callSeconds.WithLabelValues(call).Observe(d.Seconds())
}

// ObserveRefusal implements handoff.Observer.
func (m *Metrics) ObserveRefusal(reason string) { m.refusals.WithLabelValues(reason).Inc() }

// ObservePublish implements inventory.Observer.
func (m *Metrics) ObservePublish(err error, d time.Duration) {
	m.publishes.WithLabelValues(result(err, "error")).Inc()
	m.publishSecond.Observe(d.Seconds())
	if err == nil {
		m.lastPublish.Set(float64(m.now().UnixNano()) / 1e9)
	}
}

// Registered counts a kubelet registration.
func (m *Metrics) Registered() { m.registrations.Inc() }

func result(err error, bad string) string {
	if err != nil {
		return bad
	}
	return "ok"
}

var _ handoff.Observer = (*Metrics)(nil)
