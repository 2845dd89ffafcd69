// Package book is the vgpu plugin's card book: which cards every node has, which
// tasks hold which of them, what the placement engine said of each request shape on
// each node, and what preempt and reclaim asked last. It is plain Go over Tessera's
// own types and Volcano's ID and Info types; it never sees the session object, so it
// is built and tested without one. The plugin's Scheduler (package vgpu) owns one
// InFlight store per scheduler process; the rest is built afresh every session.
//
// Files, from the top floor down (each uses only files below it):
//
//	capacity.go    free and total cards, the supply the queue shares divide, why a request never fits
//	dra.go         the DRA nodes' cards in the ledger: what allocated claims consume, results left out
//	ledger.go      Ledger: every node's cards, the session's bookings and releases, and what is remembered per node
//	dranodes.go    the cards of DRA nodes, kept apart from the cards vGPU tasks are placed on
//	answers.go     the table of the engine's answers per request shape and node, kept while the node is unchanged
//	demand.go      Demand: the least a gang takes from the cards, and whether it exceeds a capacity
//	evictmemo.go   per node, the last answer to "would evicting these victims make the task fit"
//	holdings.go    Holdings: what a placed task holds, from its pod or from the in-flight store
//	requests.go    Requests: each task's parsed demand and its request shape
//	pipelines.go   Pipelines: the session's pipelined tasks and the cards each expects
//	inflight.go    InFlight: assignments made that the informer has not shown back yet
//	reasons.go     why tasks stay pending: the refusal counts and kinds the metrics report
//	nodetasks.go   NodeTasks: a node's running and releasing vGPU tasks, as preempt and reclaim see them
package book
