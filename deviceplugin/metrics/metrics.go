// Package metrics exposes the node agent's Prometheus metrics. Names are documented in
// docs/device-plugin.md; card and container gauges are computed at scrape time from the
// registry and the handoff records, so they never drift from what the agent serves.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/hookenv"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

const namespace = "tessera"

// Metrics holds the event counters and the scrape-time collector.
type Metrics struct {
	calls         *prometheus.CounterVec
	callSeconds   *prometheus.HistogramVec
	publishes     *prometheus.CounterVec
	publishSecond prometheus.Histogram
	registrations prometheus.Counter
}

// Sources are read on every scrape.
type Sources struct {
	Cards *cards.Registry
	Store *records.Store
	Pods  handoff.PodLookup
}

// New registers every metric on reg.
func New(reg prometheus.Registerer, src Sources) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "kubelet_calls_total",
			Help: "Kubelet device plugin calls by call and result (ok or refused)."}, []string{"call", "result"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "kubelet_call_duration_seconds",
			Help: "Time to answer a kubelet device plugin call.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"call"}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "inventory_publish_total",
			Help: "Node inventory writes by result (ok or error)."}, []string{"result"}),
		publishSecond: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "inventory_publish_duration_seconds",
			Help: "Time to write the node inventory.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 12)}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "kubelet_registrations_total",
			Help: "Successful registrations with the kubelet."}),
	}
	reg.MustRegister(m.calls, m.callSeconds, m.publishes, m.publishSecond, m.registrations, &collector{src: src})
	return m
}

// ObserveCall implements handoff.Observer.
func (m *Metrics) ObserveCall(call string, err error, d time.Duration) {
	m.calls.WithLabelValues(call, result(err, "refused")).Inc()
	m.callSeconds.WithLabelValues(call).Observe(d.Seconds())
}

// ObservePublish implements inventory.Observer.
func (m *Metrics) ObservePublish(err error, d time.Duration) {
	m.publishes.WithLabelValues(result(err, "error")).Inc()
	m.publishSecond.Observe(d.Seconds())
}

// Registered counts a kubelet registration.
func (m *Metrics) Registered() { m.registrations.Inc() }

func result(err error, bad string) string {
	if err != nil {
		return bad
	}
	return "ok"
}

var (
	cardLabels      = []string{"uuid", "index", "model"}
	containerLabels = []string{"namespace", "pod", "container", "uuid"}
	descMemory      = prometheus.NewDesc(namespace+"_card_memory_mib", "Device memory of the card.", cardLabels, nil)
	descShares      = prometheus.NewDesc(namespace+"_card_shares", "Containers the card may serve at once (kubelet slots).", cardLabels, nil)
	descHealthy     = prometheus.NewDesc(namespace+"_card_healthy", "1 when the card is healthy, 0 when not.", cardLabels, nil)
	descAssignedMem = prometheus.NewDesc(namespace+"_card_assigned_memory_mib", "Memory limits of the containers set up on the card.", cardLabels, nil)
	descAssignedSM  = prometheus.NewDesc(namespace+"_card_assigned_cores_percent", "Sum of the SM limits of the containers set up on the card.", cardLabels, nil)
	descContMem     = prometheus.NewDesc(namespace+"_container_memory_limit_mib", "A container's memory limit on one of its cards.", containerLabels, nil)
	descContSM      = prometheus.NewDesc(namespace+"_container_sm_limit_percent", "A container's SM limit on one of its cards (100 = uncapped).", containerLabels, nil)
)

var (
	_ prometheus.Collector = (*collector)(nil)
	_ handoff.Observer     = (*Metrics)(nil)
)

type collector struct{ src Sources }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMemory, descShares, descHealthy, descAssignedMem, descAssignedSM, descContMem, descContSM} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	inv := c.src.Cards.Inventory()
	assignedMem, assignedSM := map[string]float64{}, map[string]float64{}
	recs, err := c.src.Store.Records()
	if err != nil {
		klog.ErrorS(err, "Metrics: cannot read container records")
	}
	for uid, rs := range recs {
		if !c.src.Pods.Exists(types.UID(uid)) {
			continue // gone; its directory waits for garbage collection
		}
		for _, r := range rs {
			for _, card := range r.Cards {
				assignedMem[card.UUID] += float64(card.MemoryMiB)
				assignedSM[card.UUID] += float64(card.Cores)
				labels := []string{r.Namespace, r.Pod, r.Container, card.UUID}
				ch <- prometheus.MustNewConstMetric(descContMem, prometheus.GaugeValue, float64(card.MemoryMiB), labels...)
				ch <- prometheus.MustNewConstMetric(descContSM, prometheus.GaugeValue, float64(hookenv.SMLimit(card.Cores)), labels...)
			}
		}
	}
	for _, card := range inv.Cards {
		l := []string{card.UUID, strconv.Itoa(card.Index), card.Model}
		healthy := 0.0
		if card.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(card.MemoryMiB), l...)
		ch <- prometheus.MustNewConstMetric(descShares, prometheus.GaugeValue, float64(card.Shares), l...)
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, l...)
		ch <- prometheus.MustNewConstMetric(descAssignedMem, prometheus.GaugeValue, assignedMem[card.UUID], l...)
		ch <- prometheus.MustNewConstMetric(descAssignedSM, prometheus.GaugeValue, assignedSM[card.UUID], l...)
	}
}
