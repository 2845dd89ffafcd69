// Package vgpu is Tessera's Volcano scheduler plugin: it chooses the node and the
// cards for every container that requests vGPU resources, gang-aware, and records
// the choice on the pod so that it travels on the Binding. Tasks without vGPU
// requests pass through every hook untouched.
//
// This package is the Volcano adapter only: it turns Volcano's hooks and events into
// questions for two packages that never see the session object, the card book
// (package book: cards, bookings, remembered answers, pipelines, in-flight
// assignments) and the queue shares (package shares: card memory and cores divided
// among the queues by weight). One file per extension point, from the top floor down
// (each file uses only files below it; deps_test.go holds the rule):
//
//	vgpu.go         the framework.Plugin: OnSessionOpen reads the session and registers every hook below
//	predicate.go    PredicateFn (the cards' fit, from the book's answers) and PrePredicateFn
//	evictcheck.go   the predicate's question for preempt and reclaim: could evicting on this node help?
//	open.go         session open: every node's cards and the bookings of the pods on it, stale assignments dropped
//	draclaims.go    session open: DRA nodes' cards and claims into the book, DRA pods into the queue shares
//	migplan.go      session open: MIG re-partition plans for pending profiles (migplan_choose.go picks, migplan_patch.go writes)
//	close.go        OnSessionClose: metrics published, refusals of pod-less VolcanoJobs written on their PodGroups
//	allocatable.go  AllocatableFn: a task held to its queue's share, and to the node preempt frees cards on
//	allocate.go     EventHandler: cards booked and the assignment written (allocate), pipelines checked, rollbacks
//	enqueue.go      JobEnqueueableFn: a gang kept out while the cards, or its queue's capability, cannot hold it
//	queues.go       the queue share's hooks: shares read at open, QueueOrderFn, PreemptiveFn, their event handler
//	gate.go         the queue gate: which gangs' gated pods their queue's share admits now; gate_patch.go removes it
//	scheduler.go    Scheduler: what outlives a session (in-flight store, decoders, metrics, VolcanoJob watch); New, Register
//	victims.go      ReclaimableFn and PreemptableFn: the fewest vGPU victims whose cards make the task fit
//	cacheload.go    the session checked against the scheduler's informer: nodes and jobs it has not loaded sit out
//	gang.go         JobValidFn: a gang no node's cards could ever hold; the record of gangs kept back
//	nodeorder.go    NodeOrderFn: the placement score of the task's cards on the node
//	jobdemand.go    what members of a VolcanoJob not yet created will ask (for the shares and enqueue)
//	args.go         the plugin's arguments, parsed once per change and logged
//	plugin.go       the per-session plugin value: what each hook shares, and which lock guards what
//	metrics.go      the Prometheus metrics the Scheduler owns
//	jobwatch.go     the VolcanoJob watch the Scheduler owns (task templates of members not yet created)
//	volcano.go      Volcano's own accounting: the vGPU resources it must leave to Tessera
package vgpu
