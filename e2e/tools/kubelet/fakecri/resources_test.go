package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// brief is a container's reported Linux resources on one line, for comparisons.
func brief(r *runtimeapi.ContainerResources) string {
	l := r.GetLinux()
	if l == nil {
		return "<no linux resources>"
	}
	var unified []string
	for k, v := range l.GetUnified() {
		unified = append(unified, k+"="+v)
	}
	sort.Strings(unified)
	var pages []string
	for _, p := range l.GetHugepageLimits() {
		pages = append(pages, fmt.Sprintf("%s:%d", p.GetPageSize(), p.GetLimit()))
	}
	return fmt.Sprintf("period=%d quota=%d shares=%d mem=%d swap=%d oom=%d cpus=%q mems=%q hugepages=%v unified=%s",
		l.GetCpuPeriod(), l.GetCpuQuota(), l.GetCpuShares(), l.GetMemoryLimitInBytes(), l.GetMemorySwapLimitInBytes(),
		l.GetOomScoreAdj(), l.GetCpusetCpus(), l.GetCpusetMems(), pages, strings.Join(unified, ","))
}

// createIn creates container name in a new sandbox of r with the resources.
func createIn(t *testing.T, r *runtime, name string, res *runtimeapi.LinuxContainerResources) string {
	t.Helper()
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: "uid-" + name}}})
	if err != nil {
		t.Fatal(err)
	}
	created, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId,
		SandboxConfig: &runtimeapi.PodSandboxConfig{},
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"sleep", "infinity"},
			Labels: map[string]string{labelPodName: name, labelPodNamespace: "ns", labelPodUID: "uid-" + name, labelContainer: "main"},
			Linux:  &runtimeapi.LinuxContainerConfig{Resources: res}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		t.Fatal(err)
	}
	return created.ContainerId
}

func reported(t *testing.T, r *runtime, id string) string {
	t.Helper()
	st, err := r.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	return brief(st.GetStatus().GetResources())
}

// ContainerStatus reports the container's resources as containerd does: what the kubelet
// gave CreateContainer, then merged with every UpdateContainerResources (zero fields keep
// the value before, the OOM score stays the one it was created with), the swap limit
// following the memory limit where the host has a swap controller. The kubelet reads its
// CPU period, quota and shares and its memory limit back into the pod's status; the fake
// alone reports no resources at all.
func TestContainerStatusReportsResourcesAsContainerd(t *testing.T) {
	const gi = int64(1) << 30
	r := newRuntime(fake.NewFakeRemoteRuntime(), t.TempDir(), "node-1")
	r.host = cgroupHost{swap: true, hugetlb: true}
	id := createIn(t, r, "burstable", &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512,
		MemoryLimitInBytes: gi, OomScoreAdj: 999, CpusetCpus: "0-1",
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
		Unified:        map[string]string{"memory.oom.group": "1"}})
	want := `period=100000 quota=50000 shares=512 mem=1073741824 swap=1073741824 oom=999 cpus="0-1" mems="" hugepages=[2MB:0] unified=memory.oom.group=1`
	if got := reported(t, r, id); got != want {
		t.Errorf("after create:\n got %s\nwant %s", got, want)
	}

	// A resize: new shares and memory limit; the rest is left as it was.
	if _, err := r.UpdateContainerResources(context.Background(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 2 * gi, OomScoreAdj: -5,
			Unified: map[string]string{"memory.high": "max"}}}); err != nil {
		t.Fatal(err)
	}
	want = `period=100000 quota=50000 shares=1024 mem=2147483648 swap=2147483648 oom=999 cpus="0-1" mems="" hugepages=[2MB:0] unified=memory.high=max,memory.oom.group=1`
	if got := reported(t, r, id); got != want {
		t.Errorf("after update:\n got %s\nwant %s", got, want)
	}

	// No resources at all: an empty Linux part, as containerd always has one on Linux.
	bare := createIn(t, r, "bare", nil)
	if got, want := reported(t, r, bare), `period=0 quota=0 shares=0 mem=0 swap=0 oom=0 cpus="" mems="" hugepages=[] unified=`; got != want {
		t.Errorf("created without resources:\n got %s\nwant %s", got, want)
	}

	// A host without swap or hugetlb controllers: no swap limit, no huge page limits.
	plain := newRuntime(fake.NewFakeRemoteRuntime(), t.TempDir(), "node-2")
	plain.host = cgroupHost{}
	id = createIn(t, plain, "limited", &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: gi,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "1GB", Limit: 1 << 30}}})
	if got, want := reported(t, plain, id), `period=0 quota=0 shares=2 mem=1073741824 swap=0 oom=0 cpus="" mems="" hugepages=[] unified=`; got != want {
		t.Errorf("host without swap and hugetlb controllers:\n got %s\nwant %s", got, want)
	}

	// An unknown container is not found, as in containerd.
	_, err := r.UpdateContainerResources(context.Background(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "nope",
		Linux: &runtimeapi.LinuxContainerResources{CpuShares: 2}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("updating an unknown container: %v, want NotFound", err)
	}
}
