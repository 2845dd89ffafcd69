package api

// Environment variables the node agent gives a container and vgpu-core reads.
// docs/reference.md carries the same table for users; vgpu-core/README.md for the C side.
const (
	// EnvVisibleUUIDs lists the container's card UUIDs in CUDA ordinal order.
	EnvVisibleUUIDs = "TESSERA_VISIBLE_UUIDS"
	// EnvMemoryLimitMiB lists the per-card memory limit in MiB (0 = unlimited).
	EnvMemoryLimitMiB = "TESSERA_MEMORY_LIMIT_MIB"
	// EnvSMLimit lists the per-card SM limit in percent (100 = uncapped).
	EnvSMLimit = "TESSERA_SM_LIMIT"
	// EnvQoS is the service class: best-effort, fixed-share or burst-share.
	EnvQoS = "TESSERA_QOS"
	// EnvSharedRegion is the path of the container's shared accounting region.
	EnvSharedRegion = "TESSERA_SHARED_REGION"
	// EnvLimitsFile is the path of a KEY=VALUE file with the keys above; it overrides the environment.
	EnvLimitsFile = "TESSERA_LIMITS_FILE"
	// EnvLogLevel is vgpu-core's log level: error, warn, info or debug.
	EnvLogLevel = "TESSERA_LOG_LEVEL"
	// EnvContextReserveMiB is counted against a card's memory limit for every CUDA context on
	// it: the driver's own footprint, which NVML counts and the allocations do not.
	EnvContextReserveMiB = "TESSERA_CONTEXT_RESERVE_MIB"
)
