package memguard

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Actions of tessera_agent_memory_guard_actions_total: a fixed set.
const (
	ActionReported   = "reported"    // over its limit in report mode (once per pod and card while it stays over)
	ActionKilled     = "killed"      // a process stopped in enforce mode
	ActionKillFailed = "kill_failed" // a process that could not be stopped
)

// Metrics are the guard's series, registered once per agent.
type Metrics struct {
	active    prometheus.Gauge
	actions   *prometheus.CounterVec
	failures  prometheus.Counter
	unmanaged *prometheus.GaugeVec
}

// NewMetrics registers the guard's series on reg, every one labelled with the node.
func NewMetrics(reg prometheus.Registerer, node string) *Metrics {
	c := prometheus.Labels{"node": node}
	m := &Metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tessera", Name: "agent_memory_guard_active", ConstLabels: c,
			Help: "1 while the memory guard checks the node's cards (it needs the host's processes), 0 when it is off."}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tessera", Name: "agent_memory_guard_actions_total", ConstLabels: c,
			Help: "What the memory guard did about pods over their memory limit, as NVML counts it: reported, killed (a process), kill_failed."},
			[]string{"action"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tessera", Name: "agent_memory_guard_card_errors_total", ConstLabels: c,
			Help: "Checks in which NVML could not list a card's processes (that card went unchecked)."}),
		unmanaged: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tessera", Name: "card_unmanaged_memory_bytes", ConstLabels: c,
			Help: "Device memory held on the card by processes outside every pod the agent set up (host processes, another device plugin's pods), at the memory guard's last check."},
			[]string{"uuid"}),
	}
	for _, a := range []string{ActionReported, ActionKilled, ActionKillFailed} {
		m.actions.WithLabelValues(a)
	}
	reg.MustRegister(m.active, m.actions, m.failures, m.unmanaged)
	return m
}

func (m *Metrics) setActive(on bool) {
	if m == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.active.Set(v)
}

func (m *Metrics) action(a string) {
	if m != nil {
		m.actions.WithLabelValues(a).Inc()
	}
}

func (m *Metrics) checkFailed() {
	if m != nil {
		m.failures.Inc()
	}
}

func (m *Metrics) setUnmanaged(byCard map[string]uint64) {
	if m == nil {
		return
	}
	m.unmanaged.Reset()
	for uuid, b := range byCard {
		m.unmanaged.WithLabelValues(uuid).Set(float64(b))
	}
}
