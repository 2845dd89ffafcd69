package main

import (
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What containerd reports as a container's resources (ContainerStatus.Resources), kept
// the way containerd keeps it. containerd writes the kubelet's LinuxContainerResources
// into the container's OCI spec when it creates the container (WithResources, and
// WithOOMScoreAdj for the OOM score) and merges every UpdateContainerResources into that
// spec (WithResources again, on a copy); ContainerStatus then copies the spec's CPU,
// memory, huge page and unified settings and the process's OOM score adjustment back
// (copyResourcesToStatus). So:
//
//   - a zero CPU period, quota or shares, an empty cpuset or a zero memory or swap limit
//     leaves the value already in the spec, on create (nothing) and on update alike;
//   - a memory limit with no swap limit also sets the swap limit to the memory limit
//     where the host has a swap controller ("to prevent container from swapping by
//     default");
//   - huge page limits are appended where the host has the hugetlb controller and
//     skipped otherwise (containerd's default tolerate_missing_hugetlb_controller);
//   - unified (cgroup v2) entries are merged key by key;
//   - the OOM score adjustment is taken on create only;
//   - on Linux Resources.Linux is never nil, even for a container created without
//     resources.
//
// The kubelet reads CPU period, quota and shares and the memory limit back from it
// (toKubeContainerResources) for the pod's status.

// cgroupHost says which optional cgroup controllers the host has, as containerd detects
// them.
type cgroupHost struct {
	swap, hugetlb bool
}

// detectCgroupHost looks the controllers up where containerd does: on cgroup v2 the
// swap controller is memory.swap.max in this process's own cgroup (the root has none)
// and hugetlb is listed in cgroup.controllers; on v1 each has its own hierarchy.
func detectCgroupHost() cgroupHost {
	var h cgroupHost
	if controllers, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		h.hugetlb = strings.Contains(" "+strings.TrimSpace(string(controllers))+" ", " hugetlb ")
		own := "/"
		if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, "0::"); ok {
					own = rest
				}
			}
		}
		h.swap = exists(filepath.Join("/sys/fs/cgroup", own, "memory.swap.max"))
		return h
	}
	h.swap = exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	h.hugetlb = exists("/sys/fs/cgroup/hugetlb")
	return h
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// createdResources is the status of a container created with config's resources.
func (h cgroupHost) createdResources(config *runtimeapi.ContainerConfig) *runtimeapi.ContainerResources {
	linux := &runtimeapi.LinuxContainerResources{}
	if r := config.GetLinux().GetResources(); r != nil {
		h.merge(linux, r)
		linux.OomScoreAdj = r.GetOomScoreAdj()
	}
	return &runtimeapi.ContainerResources{Linux: linux}
}

// updatedResources is the status after UpdateContainerResources with r; old stays as it
// was.
func (h cgroupHost) updatedResources(old *runtimeapi.ContainerResources, r *runtimeapi.LinuxContainerResources) *runtimeapi.ContainerResources {
	linux := copyResources(old.GetLinux())
	if r != nil {
		h.merge(linux, r)
	}
	return &runtimeapi.ContainerResources{Linux: linux}
}

// merge writes r into spec as containerd's WithResources writes it into the OCI spec.
func (h cgroupHost) merge(spec, r *runtimeapi.LinuxContainerResources) {
	if v := r.GetCpuPeriod(); v != 0 {
		spec.CpuPeriod = v
	}
	if v := r.GetCpuQuota(); v != 0 {
		spec.CpuQuota = v
	}
	if v := r.GetCpuShares(); v != 0 {
		spec.CpuShares = v
	}
	if v := r.GetCpusetCpus(); v != "" {
		spec.CpusetCpus = v
	}
	if v := r.GetCpusetMems(); v != "" {
		spec.CpusetMems = v
	}
	limit, swap := r.GetMemoryLimitInBytes(), r.GetMemorySwapLimitInBytes()
	if limit != 0 {
		spec.MemoryLimitInBytes = limit
		if swap == 0 && h.swap {
			spec.MemorySwapLimitInBytes = limit
		}
	}
	if swap != 0 && h.swap {
		spec.MemorySwapLimitInBytes = swap
	}
	if h.hugetlb {
		for _, l := range r.GetHugepageLimits() {
			spec.HugepageLimits = append(spec.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: l.GetPageSize(), Limit: l.GetLimit()})
		}
	}
	if u := r.GetUnified(); u != nil {
		if spec.Unified == nil {
			spec.Unified = map[string]string{}
		}
		for k, v := range u {
			spec.Unified[k] = v
		}
	}
}

// copyResources copies what merge and the status keep: the spec containerd holds.
func copyResources(r *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	out := &runtimeapi.LinuxContainerResources{CpuPeriod: r.GetCpuPeriod(), CpuQuota: r.GetCpuQuota(), CpuShares: r.GetCpuShares(),
		MemoryLimitInBytes: r.GetMemoryLimitInBytes(), OomScoreAdj: r.GetOomScoreAdj(), CpusetCpus: r.GetCpusetCpus(),
		CpusetMems: r.GetCpusetMems(), MemorySwapLimitInBytes: r.GetMemorySwapLimitInBytes()}
	for _, l := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: l.GetPageSize(), Limit: l.GetLimit()})
	}
	if u := r.GetUnified(); u != nil {
		out.Unified = make(map[string]string, len(u))
		for k, v := range u {
			out.Unified[k] = v
		}
	}
	return out
}
