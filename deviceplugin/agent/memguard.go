package agent

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/memguard"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

// newMemoryGuard builds the memory guard, or returns nil (it is off, or cannot see the
// containers' processes, and says which). Its metrics are registered either way, so that
// tessera_agent_memory_guard_active tells a dashboard which nodes are guarded.
// limits are the pods' limits: the device plugin's records (recordLimits) or, with cardAPI
// dra, the prepared claims (dra.GuardLimits).
func newMemoryGuard(cfg *config.Config, client kubernetes.Interface, procRoot string, devices map[string]nvml.Device,
	limits memguard.Limits, reg prometheus.Registerer) *memguard.Guard {
	m := memguard.NewMetrics(reg, cfg.NodeName)
	mg := cfg.MemoryGuard
	if mg.Mode == config.MemoryGuardOff {
		klog.InfoS("Memory guard off (memoryGuard.mode): a container that escapes vgpu-core's limits is not stopped by the agent")
		return nil
	}
	if procRoot == "" {
		procRoot = "/proc"
	}
	if !usage.SeesHostPIDs(procRoot) {
		klog.InfoS("WARNING: memory guard off: the agent is not in the host's pid namespace (set hostPID), so it cannot tell which pod's processes hold a card's memory; "+
			"a container that escapes vgpu-core's limits is not stopped", "mode", mg.Mode, "procRoot", procRoot)
		return nil
	}
	return memguard.New(memguard.Options{Mode: mg.Mode, Interval: mg.Interval.Duration, OverChecks: mg.OverChecks, ProcRoot: procRoot,
		Policy: memguard.Policy{ContextAllowance: uint64(mg.ContextAllowance.Value()), CountedProcesses: mg.CountedProcesses}},
		devices, limits, memguard.PidfdKiller{ProcRoot: procRoot}, memguard.PodEvents{Client: client, Node: cfg.NodeName}, m)
}

// recordLimits are the guard's limits on a device-plugin node: the records of the pods
// that still exist, read at each check.
func recordLimits(store *records.Store, pods handoff.PodLookup) memguard.Limits {
	return func() (map[types.UID]memguard.PodLimits, error) {
		recs, err := store.Records()
		if err != nil {
			return nil, err
		}
		return podLimits(recs, pods.Exists), nil
	}
}

// podLimits sums the memory limits of each live pod's containers per card, from the
// records the agent wrote at Allocate (what it verified, never what the pod says now).
func podLimits(recs map[string][]*records.Record, exists func(types.UID) bool) map[types.UID]memguard.PodLimits {
	out := make(map[types.UID]memguard.PodLimits, len(recs))
	for uid, rs := range recs {
		if !exists(types.UID(uid)) || len(rs) == 0 {
			continue // gone: its processes are the runtime's to end
		}
		pl := memguard.PodLimits{Namespace: rs[0].Namespace, Name: rs[0].Pod, Cards: map[string]uint64{}}
		for _, r := range rs {
			for _, c := range r.Cards {
				pl.Cards[c.UUID] += uint64(c.MemoryMiB) << 20
			}
		}
		out[types.UID(uid)] = pl
	}
	return out
}
