package vgpu

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

var _ framework.PluginBuilder = (*Scheduler)(nil).New

// Scheduler owns what outlives a session in one scheduler process: the card
// assignments it has made that the informer has not shown back yet, the decode
// caches, the VolcanoJob watch and the metrics. Volcano builds a new plugin every
// session, through the Scheduler's New, and hands each of these to it.
type Scheduler struct {
	inFlight  *book.InFlight
	dec       *api.Decoders
	metrics   *metrics
	templates *jobTemplates
	args      argsMemo
	// signer is set once, by Register, before the first session.
	signer Signer
}

// NewScheduler returns a Scheduler with nothing in flight whose metrics are
// registered nowhere. Register its New as the plugin builder once per scheduler
// process.
func NewScheduler() *Scheduler {
	return newScheduler(nil)
}

// NewSchedulerWithMetrics is NewScheduler with its metrics registered on reg (init
// does it for vc-scheduler, on the registerer Volcano serves).
func NewSchedulerWithMetrics(reg prometheus.Registerer) *Scheduler {
	return newScheduler(reg)
}

func newScheduler(reg prometheus.Registerer) *Scheduler {
	return &Scheduler{inFlight: book.NewInFlight(), dec: &api.Decoders{}, metrics: newMetrics(reg), templates: newJobTemplates()}
}

// Register builds the scheduler process's one Scheduler, with its metrics on reg and
// signing every assignment with signer (nil: unsigned, for clusters whose agents do not
// verify), and hands its New to Volcano's builder registry. vc-scheduler calls it once,
// before the scheduler starts.
func Register(reg prometheus.Registerer, signer Signer) *Scheduler {
	s := newScheduler(reg)
	s.signer = signer
	framework.RegisterPluginBuilder(PluginName, s.New)
	return s
}

// New builds the plugin for one session; it is a framework.PluginBuilder.
func (s *Scheduler) New(arguments framework.Arguments) framework.Plugin {
	return &vgpuPlugin{args: s.args.parse(arguments), inFlight: s.inFlight, dec: s.dec, metrics: s.metrics, templates: s.templates,
		signer: s.signer, now: time.Now}
}

// Close stops what the Scheduler watches (tests; vc-scheduler's lives with the process).
func (s *Scheduler) Close() { s.templates.close() }
