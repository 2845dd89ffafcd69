// Package vgpu is Tessera's Volcano scheduler plugin: it chooses the node and the
// cards for every container that requests vGPU resources, gang-aware, and records
// the choice on the pod so that it travels on the Binding. Tasks without vGPU
// requests pass through every hook untouched.
package vgpu

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// PluginName is the name used in volcano-scheduler.conf.
const PluginName = pluginargs.Plugin

var (
	_ framework.Plugin        = (*vgpuPlugin)(nil)
	_ framework.PluginBuilder = (*Scheduler)(nil).New
)

type vgpuPlugin struct {
	args   pluginargs.Args
	ledger *ledger
	// shares is nil when vgpu.QueueShare is off.
	shares  *queueShares
	store   *pendingStore
	dec     *decoders
	metrics *metrics
	// signer signs each assignment written; nil writes them unsigned.
	signer Signer
	now    func() time.Time

	mu sync.RWMutex
	// requests caches each task's parsed demand (nil: none) for the session; read
	// lock-free by the predicates Volcano runs in parallel.
	requests sync.Map
	// gangs is each job's minimum member count, read when a request is parsed.
	gangs map[vapi.JobID]int
	// ssn is the session this plugin was built for (a plugin lives one session).
	ssn *framework.Session
	// bound memoises what bound pods hold, for the session.
	bound map[vapi.TaskID]heldOnce
	// pipelined are the session's pipelined vGPU tasks and the cards they expect.
	pipelined *pipelines
	// gangsRefused holds the jobs whose gang the plugin kept back this session (not
	// enqueueable, or never able to run), for the pending metric.
	gangsRefused sync.Map
	// fitErrMu guards the writes of queue-share refusals into a job's fit errors:
	// Allocatable is also asked from the predicate, in parallel.
	fitErrMu sync.Mutex
	// shapes numbers the session's request shapes.
	shapes shapeIDs
	// templates are the VolcanoJobs' task templates; unseenByJob remembers, for the
	// session, what each job's members not yet created ask for (jobdemand.go).
	templates   *jobTemplates
	unseenByJob sync.Map
	// evictingOn is, per task, the node whose victims Volcano last asked the plugin
	// for while it tries the task there (preempt.go); cleared when Volcano starts on
	// the task again (its PrePredicate).
	evictingOn sync.Map
	// lowest is, per queue, the lowest priority of its running vGPU pods, read once
	// per session when enqueue first asks (outranks).
	lowestOnce sync.Once
	lowest     map[vapi.QueueID]int32
	// cacheMissing is how many bound vGPU pods the scheduler's informer holds and
	// the session does not (cacheload.go): while any is missing, the queue shares and
	// free cards are not known, so the plugin evicts nothing and refuses no gang on them.
	cacheMissing int
}

// taskRequest caches a task's parsed demand for the session; err is the reason a
// malformed request or annotation makes the task unschedulable.
type taskRequest struct {
	req *placement.Request
	err error
	// refused counts the reasons nodes gave this session, for the pending metric.
	refused refusals
	// shape is the session's number for the request's shape (shapeKey): tasks of one
	// shape fit alike, and the ledger remembers its answers under this number.
	shape shapeID
}

// shapeID is a session's number for one request shape.
type shapeID uint32

// shapeIDs numbers the request shapes of one session: a task's shape is looked up
// once, when its request is parsed, and every predicate after that compares numbers.
type shapeIDs struct {
	mu  sync.Mutex
	ids map[string]shapeID
}

// of returns key's number, giving it the next one the first time.
func (s *shapeIDs) of(key string) shapeID {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[key]
	if !ok {
		if s.ids == nil {
			s.ids = map[string]shapeID{}
		}
		id = shapeID(len(s.ids))
		s.ids[key] = id
	}
	return id
}

// Scheduler owns what outlives a session in one scheduler process: the card
// assignments it has made that the informer has not shown back yet, the decode
// caches and the metrics. Volcano builds a new plugin every session, through the
// Scheduler's New.
type Scheduler struct {
	store     *pendingStore
	dec       *decoders
	metrics   *metrics
	templates *jobTemplates
	args      argsMemo
	signer    Signer
}

// decoders read inventories and assignments for one scheduler process, memoised
// (package api's readers, with the plugin's own questions about bound pods).
type decoders struct{ api.Decoders }

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
	return &Scheduler{store: newPendingStore(), dec: &decoders{}, metrics: newMetrics(reg), templates: newJobTemplates()}
}

// New builds the plugin for one session; it is a framework.PluginBuilder.
func (s *Scheduler) New(arguments framework.Arguments) framework.Plugin {
	args := s.args.parse(arguments)
	return &vgpuPlugin{args: args, store: s.store, dec: s.dec, metrics: s.metrics, templates: s.templates, signer: s.signer, now: time.Now,
		bound:     map[vapi.TaskID]heldOnce{},
		pipelined: newPipelines()}
}

// Close stops what the Scheduler watches (tests; vc-scheduler's lives with the process).
func (s *Scheduler) Close() { s.templates.close() }

// InFlight is how many assignments wait for the informer to show them back.
func (s *Scheduler) InFlight() int { return s.store.len() }

func (p *vgpuPlugin) Name() string { return PluginName }

func (p *vgpuPlugin) OnSessionOpen(ssn *framework.Session) {
	start := p.now()
	if added := ignoreInVolcano(p.args.Resources); len(added) > 0 {
		klog.InfoS("Volcano now leaves these vGPU resources to Tessera; pods it cached before count them until they change or the scheduler restarts (pass the conf with --scheduler-conf at start to avoid this)",
			"resources", added)
	}
	p.dec.Sweep() // what the last session did not read (pods gone, nodes rewritten) goes
	p.templates.start(ssn.VCClient())
	gaps := p.cacheGaps(ssn)
	p.cacheMissing = gaps.missing()
	p.ledger = p.buildLedger(ssn, gaps.byNode)
	p.gangs = make(map[vapi.JobID]int, len(ssn.Jobs))
	for id, job := range ssn.Jobs {
		p.gangs[id] = int(job.MinAvailable)
	}
	dropped := p.store.reconcile(p.dec.sessionPodView(ssn), p.now(), p.args.PendingTTL)
	scrubbed := p.scrubUnbound(ssn)
	// After the in-flight store has read every job's pods: a job sitting out is not gone.
	sitOut(ssn, gaps)

	ssn.AddPredicateFn(PluginName, p.predicate)
	if p.args.Weight > 0 {
		ssn.AddNodeOrderFn(PluginName, p.nodeOrder)
	}
	ssn.AddJobValidFn(PluginName, p.jobValid)
	ssn.AddJobEnqueueableFn(PluginName, p.jobEnqueueable)
	ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.onAllocate, DeallocateFunc: p.onDeallocate})
	p.ssn = ssn
	evict := func(evictor *vapi.TaskInfo, candidates []*vapi.TaskInfo) ([]*vapi.TaskInfo, int) {
		return p.victims(ssn, evictor, candidates)
	}
	ssn.AddReclaimableFn(PluginName, evict)
	ssn.AddPreemptableFn(PluginName, evict)
	ssn.AddPrePredicateFn(PluginName, func(task *vapi.TaskInfo) error {
		p.evictingOn.Delete(task.UID)
		return nil
	})
	ssn.AddAllocatableFn(PluginName, func(q *vapi.QueueInfo, t *vapi.TaskInfo) bool { return p.allocatable(ssn, q, t) })
	if p.args.QueueShare {
		// After the cards are booked, so that a queue is charged what its task holds.
		p.shares = p.buildShares(ssn)
		ssn.AddPreemptiveFn(PluginName, func(queue, task interface{}) bool {
			q, okq := queue.(*vapi.QueueInfo)
			t, okt := task.(*vapi.TaskInfo)
			return !okq || !okt || p.preemptive(q, t)
		})
		ssn.AddQueueOrderFn(PluginName, func(l, r interface{}) int {
			lq, okl := l.(*vapi.QueueInfo)
			rq, okr := r.(*vapi.QueueInfo)
			if !okl || !okr {
				return 0
			}
			return p.shares.compare(lq, rq)
		})
		ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.onPlaced(ssn), DeallocateFunc: p.onUnplaced})
	}

	took := p.now().Sub(start)
	p.metrics.open.Observe(took.Seconds())
	nodes, unusable, _ := p.ledger.counts()
	klog.V(3).InfoS("vgpu session opened", "nodes", nodes, "unusableNodes", unusable,
		"inFlight", p.store.len(), "droppedInFlight", dropped, "podsNotInCache", p.cacheMissing, "jobsSittingOut", len(gaps.jobs), "staleAssignmentsDropped", scrubbed,
		"duration", took)
}

func (p *vgpuPlugin) OnSessionClose(ssn *framework.Session) {
	p.reportPodless(ssn)
	p.publishMetrics(ssn)
	_, _, booked := p.ledger.counts()
	klog.V(3).InfoS("vgpu session closed", "booked", booked)
}

// request returns the task's parsed vGPU demand, or nil for a task without one.
func (p *vgpuPlugin) request(task *vapi.TaskInfo) *taskRequest {
	if task.Pod == nil {
		return nil
	}
	if v, ok := p.requests.Load(task.UID); ok {
		return v.(*taskRequest)
	}
	var tr *taskRequest
	if p.args.Resources.HasVGPURequest(task.Pod) {
		tr = p.parseRequest(task)
	}
	v, _ := p.requests.LoadOrStore(task.UID, tr)
	return v.(*taskRequest)
}

func (p *vgpuPlugin) parseRequest(task *vapi.TaskInfo) *taskRequest {
	r, err := p.args.Request(task.Pod)
	if err != nil {
		return &taskRequest{err: err}
	}
	r.GangSize = p.gangs[task.Job]
	return &taskRequest{req: r, shape: p.shapes.of(shapeKey(r))}
}

// shapeKey names a request's shape: requests with equal keys fit every node alike.
// %#v quotes every string, so type lists ["A100 X"] and ["A100", "X"] differ.
func shapeKey(r *placement.Request) string { return fmt.Sprintf("%#v", *r) }

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

// Signer gives the key to sign assignments with (assignkeys.Keyring); ok is false
// while it has none, and the plugin then places no vGPU task.
type Signer interface {
	Key() (api.SigningKey, bool)
}

// argsMemo parses the plugin's arguments, which Volcano hands to every session's
// builder, and reports them (and any it refuses) once per change, not every session.
type argsMemo struct {
	mu   sync.Mutex
	seen string
	args pluginargs.Args
}

func (m *argsMemo) parse(in framework.Arguments) pluginargs.Args {
	written := fmt.Sprint(map[string]any(in))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == written {
		return m.args
	}
	args, err := pluginargs.Parse(in)
	if err != nil {
		klog.ErrorS(err, "Bad vgpu plugin arguments; using defaults for those", "plugin", PluginName)
	}
	klog.V(2).InfoS("vgpu plugin arguments", "plugin", PluginName, "args", fmt.Sprintf("%+v", args))
	m.seen, m.args = written, args
	return args
}
