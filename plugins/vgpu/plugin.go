package vgpu

import (
	"sync"
	"time"

	vapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
	"github.com/tessera-gpu/tessera/plugins/vgpu/shares"
)

// PluginName is the name used in volcano-scheduler.conf.
const PluginName = pluginargs.Plugin

// vgpuPlugin is the plugin for one session: Volcano builds one per session (through
// Scheduler.New) and calls its hooks, the predicates on parallel workers.
type vgpuPlugin struct {
	args pluginargs.Args
	now  func() time.Time

	// Shared with the Scheduler that built the plugin; each guards itself.
	inFlight  *book.InFlight
	dec       *api.Decoders
	metrics   *metrics
	templates *jobTemplates
	// signer signs each assignment written; nil writes them unsigned.
	signer Signer

	// Set by OnSessionOpen before any hook runs, never replaced after; each guards
	// itself.
	ssn       *framework.Session
	requests  *book.Requests
	holdings  *book.Holdings
	ledger    *book.Ledger
	pipelined *book.Pipelines
	// shares is nil when vgpu.QueueShare is off.
	shares *shares.Shares
	// draOrder scores DRA nodes for pods whose cards come through claims.
	draOrder *draOrder
	// cacheMissing is how many bound vGPU pods the scheduler's informer holds and
	// the session does not (cacheload.go): while any is missing, the queue shares and
	// free cards are not known, so the plugin evicts nothing and refuses no gang on them.
	cacheMissing int

	// What the hooks remember for the session, each safe for parallel workers.
	// unseenByJob: per job, its members not yet created (jobdemand.go).
	unseenByJob sync.Map
	// gangsRefused: the jobs whose gang the plugin kept back (gang.go).
	gangsRefused sync.Map
	// evictingOn: per task, the node preempt tries it on (stored by victims.go,
	// read by allocatable.go, cleared by predicate.go's prePredicate).
	evictingOn sync.Map
	// lowest: per queue, the lowest priority of its running vGPU pods (enqueue.go).
	lowest lowestPriorities
	// fitErrMu guards the writes of queue-share refusals into a job's fit errors
	// (allocatable.go): Allocatable is also asked from the predicate, in parallel.
	fitErrMu sync.Mutex
}

// Signer gives the key to sign assignments with (assignkeys.Keyring); ok is false
// while it has none, and the plugin then places no vGPU task.
type Signer interface {
	Key() (api.SigningKey, bool)
}

// lowestPriorities is, per queue, the lowest priority of its running vGPU pods, read
// once per session when enqueue first asks (outranks).
type lowestPriorities struct {
	once    sync.Once
	byQueue map[vapi.QueueID]int32 // written once, under once
}

// request returns the task's parsed vGPU demand, or nil for a task without one.
func (p *vgpuPlugin) request(task *vapi.TaskInfo) *book.TaskRequest { return p.requests.Of(task) }
