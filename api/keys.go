package api

// Resource names requested in container limits. They are the names Volcano's
// deviceshare users already write, so VolcanoJobs move over unchanged.
const (
	// ResourceNumber is the number of cards a container gets.
	ResourceNumber = "volcano.sh/vgpu-number"
	// ResourceMemory is the device memory per card, in MiB.
	ResourceMemory = "volcano.sh/vgpu-memory"
	// ResourceMemoryPercentage is the device memory per card, as a percentage of the card.
	ResourceMemoryPercentage = "volcano.sh/vgpu-memory-percentage"
	// ResourceCores is the share of the card's SMs per card, in percent (100 = exclusive).
	ResourceCores = "volcano.sh/vgpu-cores"
)

// Prefix is the domain of Tessera's own annotations.
const Prefix = "tessera.io/"

// Node annotations, written by the node agent.
const (
	// AnnotationInventory holds the node's card inventory (see NodeInventory).
	AnnotationInventory = Prefix + "inventory"
	// AnnotationHeartbeat holds the RFC 3339 time of the agent's last heartbeat.
	AnnotationHeartbeat = Prefix + "heartbeat"
	// AnnotationContextReserve holds each card's CUDA context reserve (see
	// NodeContextReserve); absent when no card has one.
	AnnotationContextReserve = Prefix + "context-reserve"
	// AnnotationCardAPI names how the node's agent offers its cards to the kubelet:
	// "device-plugin" (vGPU slots) or "dra" (ResourceClaims of driver vgpu.tessera.io).
	AnnotationCardAPI = Prefix + "card-api"
)

// The values of AnnotationCardAPI.
const (
	CardAPIDevicePlugin = "device-plugin"
	CardAPIDRA          = "dra"
)

// AnnotationCordonedCards is the node annotation an administrator writes (kubectl
// tessera cordon) to keep new vGPU tasks off some of the node's cards (see
// NodeCordons). The node agent never writes it; the chart's admission policy refuses it.
const AnnotationCordonedCards = Prefix + "cordoned-cards"

// Pod annotations written by the scheduler and the node agent.
const (
	// AnnotationAssignment holds the cards chosen for each container (see PodAssignment).
	AnnotationAssignment = Prefix + "assignment"
	// AnnotationAssignedAt holds the scheduler's assignment time, in Unix nanoseconds.
	AnnotationAssignedAt = Prefix + "assigned-at"
	// AnnotationHandoff records where the node handoff stands (see Handoff* values).
	AnnotationHandoff = Prefix + "handoff"
	// AnnotationHandoffMessage explains a failed handoff.
	AnnotationHandoffMessage = Prefix + "handoff-message"
)

// Values of AnnotationHandoff.
const (
	HandoffPending = "pending"
	HandoffDone    = "done"
	HandoffFailed  = "failed"
)

// Pod annotations that users set to steer card selection.
const (
	// AnnotationGPUTypeInclude restricts cards to models containing one of the
	// comma-separated substrings (case-insensitive).
	AnnotationGPUTypeInclude = Prefix + "gpu-type-include"
	// AnnotationGPUTypeExclude rejects cards whose model contains one of the substrings.
	AnnotationGPUTypeExclude = Prefix + "gpu-type-exclude"
	// AnnotationGPUUUIDInclude restricts cards to the comma-separated UUIDs (exact).
	AnnotationGPUUUIDInclude = Prefix + "gpu-uuid-include"
	// AnnotationGPUUUIDExclude rejects the comma-separated UUIDs (exact).
	AnnotationGPUUUIDExclude = Prefix + "gpu-uuid-exclude"
	// AnnotationNodePolicy overrides the node scoring policy: binpack, spread or topology.
	AnnotationNodePolicy = Prefix + "node-policy"
	// AnnotationCardPolicy overrides the card choice policy: binpack, spread, topology
	// or idle-only (only cards no other pod uses, and no other pod joins them).
	AnnotationCardPolicy = Prefix + "card-policy"
	// AnnotationScoreWeights weighs the terms that rank nodes and cards for the pod
	// (see ScoreWeights), e.g. "policy=3,topology=1,numa=1".
	AnnotationScoreWeights = Prefix + "score-weights"
	// AnnotationNUMABind, when "true", requires all cards of a container on one NUMA node.
	AnnotationNUMABind = Prefix + "numa-bind"
	// AnnotationQoS selects the service class: best-effort, fixed-share or burst-share.
	AnnotationQoS = Prefix + "qos"
	// SchedulingGateQueueShare is the scheduling gate (spec.schedulingGates, not an
	// annotation) the admission webhook puts on vGPU pods with queueGate on; the vgpu
	// scheduler plugin removes it once the pod's queue admits the pod's gang.
	SchedulingGateQueueShare = Prefix + "queue-share"
	// AnnotationMIGProfile asks for whole MIG instances of one profile, named as in
	// AnnotationMIGInstances (e.g. "3g.40gb"): each vGPU container gets its
	// volcano.sh/vgpu-number instances of that profile instead of shares of cards.
	AnnotationMIGProfile = Prefix + "mig-profile"
	// AnnotationMIGRepartition is "true" on a node whose agent may change the MIG
	// layout of its idle cards when the scheduler asks (AnnotationMIGPlan); written by
	// the agent with the inventory, absent when the agent does not allow it.
	AnnotationMIGRepartition = Prefix + "mig-repartition"
	// AnnotationMIGPlan is the scheduler's request to change one card's MIG layout
	// (MIGPlan); AnnotationMIGPlanStatus is the agent's answer (MIGPlanStatus).
	AnnotationMIGPlan       = Prefix + "mig-plan"
	AnnotationMIGPlanStatus = Prefix + "mig-plan-status"
)

// Annotations of Volcano's deviceshare and the HAMi volcano device plugin, read (and
// where compatibility mode is on, written) by Tessera.
const (
	VolcanoNodeRegister        = "volcano.sh/node-vgpu-register"
	VolcanoNodeHandshake       = "volcano.sh/node-vgpu-handshake"
	VolcanoAssignedIDs         = "volcano.sh/vgpu-ids-new"
	VolcanoDevicesToAllocate   = "volcano.sh/devices-to-allocate"
	VolcanoAssignedNode        = "volcano.sh/vgpu-node"
	VolcanoAssignedTime        = "volcano.sh/vgpu-time"
	VolcanoBindPhase           = "volcano.sh/bind-phase"
	VolcanoBindTime            = "volcano.sh/bind-time"
	VolcanoBindPhaseAllocating = "allocating"
	// NVIDIA-prefixed user annotations that Volcano's deviceshare honours; Tessera
	// reads them when its own keys are absent.
	NvidiaUseGPUType   = "nvidia.com/use-gputype"
	NvidiaNoUseGPUType = "nvidia.com/nouse-gputype"
	NvidiaUseGPUUUID   = "nvidia.com/use-gpuuuid"
	NvidiaNoUseGPUUUID = "nvidia.com/nouse-gpuuuid"
	// VolcanoDeviceType is the vendor field of Volcano's card entries.
	VolcanoDeviceType = "NVIDIA"
)
