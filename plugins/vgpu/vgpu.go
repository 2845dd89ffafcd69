package vgpu

import (
	"k8s.io/klog/v2"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/tessera-gpu/tessera/plugins/vgpu/book"
)

var _ framework.Plugin = (*vgpuPlugin)(nil)

func (p *vgpuPlugin) Name() string { return PluginName }

// OnSessionOpen reads the session's cards and bookings, then registers the hooks.
func (p *vgpuPlugin) OnSessionOpen(ssn *framework.Session) {
	start := p.now()
	if added := ignoreInVolcano(p.args.Resources); len(added) > 0 {
		klog.InfoS("Volcano now leaves these vGPU resources to Tessera; pods it cached before count them until they change or the scheduler restarts (pass the conf with --scheduler-conf at start to avoid this)",
			"resources", added)
	}
	p.dec.Sweep() // what the last session did not read (pods gone, nodes rewritten) goes
	p.templates.start(ssn.VCClient())
	p.ssn = ssn
	p.pipelined = book.NewPipelines()
	p.holdings = book.NewHoldings(p.dec, p.inFlight, p.args.Resources)
	gaps := p.cacheGaps(ssn)
	p.cacheMissing = gaps.missing()
	p.ledger = p.buildLedger(ssn, gaps.byNode)
	claims := p.readClaims(ssn) // DRA nodes' cards and their claims into the book (draclaims.go)
	p.draOrder = newDRAOrder(p.args, p.ledger, claims.byKey, podClaimKeys)
	p.requests = book.NewRequests(p.args, ssn.Jobs)
	dropped := p.inFlight.Reconcile(sessionPodView(ssn, p.dec), p.now(), p.args.PendingTTL)
	scrubbed := p.scrubUnbound(ssn)
	// After the in-flight store has read every job's pods: a job sitting out is not gone.
	sitOut(ssn, gaps)
	p.openMIGPlans(ssn) // before the hooks: cards being re-partitioned take no pod (migplan.go)

	ssn.AddPredicateFn(PluginName, p.predicate)
	ssn.AddPrePredicateFn(PluginName, p.prePredicate)
	if p.args.Weight > 0 {
		ssn.AddNodeOrderFn(PluginName, p.nodeOrder)
	}
	ssn.AddJobValidFn(PluginName, p.jobValid)
	ssn.AddJobEnqueueableFn(PluginName, p.jobEnqueueable)
	ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.onAllocate, DeallocateFunc: p.onDeallocate})
	ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.draOrder.onAllocate, DeallocateFunc: p.draOrder.onDeallocate})
	ssn.AddReclaimableFn(PluginName, p.victims)
	ssn.AddPreemptableFn(PluginName, p.victims)
	ssn.AddAllocatableFn(PluginName, p.allocatable)
	if p.args.QueueShare {
		// After the cards are booked, so that a queue is charged what its task holds.
		p.shares = p.buildShares(ssn)
		p.chargeClaims(ssn, claims) // and into the queue shares
		ssn.AddPreemptiveFn(PluginName, p.preemptive)
		ssn.AddQueueOrderFn(PluginName, p.queueOrder)
		ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.onPlaced, DeallocateFunc: p.onUnplaced})
	}
	p.openGates(ssn) // after the shares: which queue-gated pods may be scheduled (gate.go)
	// Last, on the whole session's view: evicts for one DRA pod that Volcano's reclaim never serves (drareclaim.go).
	p.reclaimForClaims(ssn, claims)

	took := p.now().Sub(start)
	p.metrics.open.Observe(took.Seconds())
	nodes, unusable, _ := p.ledger.Counts()
	klog.V(3).InfoS("vgpu session opened", "nodes", nodes, "unusableNodes", unusable,
		"inFlight", p.inFlight.Len(), "droppedInFlight", dropped, "podsNotInCache", p.cacheMissing, "jobsSittingOut", len(gaps.jobs), "staleAssignmentsDropped", scrubbed,
		"duration", took)
}
