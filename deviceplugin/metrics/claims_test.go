package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/dra"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

// nodePods is a DRA node's pods as the agent's informer lists them.
type nodePods []*corev1.Pod

func (p nodePods) Get(namespace, name string) (*corev1.Pod, bool) {
	for _, pod := range p {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

func (p nodePods) Exists(uid types.UID) bool {
	_, ok := p.byUID(uid)
	return ok
}

func (p nodePods) byUID(uid types.UID) (*corev1.Pod, bool) {
	for _, pod := range p {
		if pod.UID == uid {
			return pod, true
		}
	}
	return nil, false
}

func (p nodePods) Synced() bool                 { return true }
func (p nodePods) List() ([]*corev1.Pod, error) { return p, nil }
func (p nodePods) prepared(c map[string]dra.PreparedClaim) func() map[string]dra.PreparedClaim {
	return func() map[string]dra.PreparedClaim { return c }
}

// claimPod is a pod whose container "main" uses the claim named claim, in queue "research".
func claimPod(uid, name, claim string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid),
		Labels: map[string]string{"volcano.sh/queue-name": "research"}},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}},
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
}

// On a DRA node the container series come from the prepared claims: pod "train" holds
// claim c1 (4096 MiB and 30 cores of GPU-a) with its region on the pod's region volume,
// where the agent reads 500 MiB in use; pod "infer" holds claim c2 (1024 MiB, 10 cores)
// with its region in the pod's /dev/shm: limits, no usage. A claim prepared for a pod not
// on the node (c3) makes no series. The series name the claim's pod, container
// "claim-<claim UID>".
func TestMetricsReportClaimsOnADRANode(t *testing.T) {
	reg := cards.NewRegistry([]api.Card{{UUID: "GPU-a", Index: 0, Model: "H100", MemoryMiB: 81559, Shares: 8, Healthy: true}}, nil)
	share := func(mib int64, cores int) []dra.PreparedDevice {
		return []dra.PreparedDevice{{Share: dra.Share{Request: "gpu", Device: "card-0", UUID: "GPU-a", MemoryMiB: mib, Cores: cores}}}
	}
	prepared := map[string]dra.PreparedClaim{
		"c1": {Namespace: "ns", Name: "share-a", Devices: share(4096, 30), Region: dra.RegionVolume},
		"c2": {Namespace: "ns", Name: "share-b", Devices: share(1024, 10), Region: dra.RegionShm},
		"c3": {Namespace: "ns", Name: "share-c", Devices: share(2048, 20), Region: dra.RegionVolume},
	}
	pods := nodePods{claimPod("p1", "train", "share-a"), claimPod("p2", "infer", "share-b")}
	root := t.TempDir()
	kubeletDir := root + "/kubelet-pods"
	regionOf(t, &records.Store{Root: root}, "p1")
	writeRegion(t, kubeletDir+"/p1/volumes/kubernetes.io~empty-dir/"+api.RegionVolumeName+"/"+dra.RegionFileName("c1"), 500<<20)

	promReg := prometheus.NewPedanticRegistry()
	New(promReg, Sources{Node: "n1", Cards: reg, Store: dra.ClaimSource{Prepared: pods.prepared(prepared), Pods: pods.List},
		Pods: pods, KubeletPodsDir: kubeletDir, ProcRoot: t.TempDir()})
	want := `
# HELP tessera_card_assigned_memory_bytes Memory limits of the containers set up on the card.
# TYPE tessera_card_assigned_memory_bytes gauge
tessera_card_assigned_memory_bytes{index="0",model="H100",node="n1",uuid="GPU-a"} 5.36870912e+09
# HELP tessera_container_gpu_memory_limit_bytes A container's memory limit on one of its cards.
# TYPE tessera_container_gpu_memory_limit_bytes gauge
tessera_container_gpu_memory_limit_bytes{container="claim-c1",index="0",namespace="ns",node="n1",pod="train",uuid="GPU-a"} 4.294967296e+09
tessera_container_gpu_memory_limit_bytes{container="claim-c2",index="0",namespace="ns",node="n1",pod="infer",uuid="GPU-a"} 1.073741824e+09
# HELP tessera_container_gpu_memory_used_bytes Device memory the container's live processes hold on the card, read from vgpu-core's shared region.
# TYPE tessera_container_gpu_memory_used_bytes gauge
tessera_container_gpu_memory_used_bytes{container="claim-c1",index="0",namespace="ns",node="n1",pod="train",uuid="GPU-a"} 5.24288e+08
# HELP tessera_container_queue_info 1 for every vGPU container, labelled with its Volcano queue (the pod's volcano.sh/queue-name label; empty when it has none): join on namespace, pod, container to sum use by queue.
# TYPE tessera_container_queue_info gauge
tessera_container_queue_info{container="claim-c1",namespace="ns",node="n1",pod="train",queue="research"} 1
tessera_container_queue_info{container="claim-c2",namespace="ns",node="n1",pod="infer",queue="research"} 1
# HELP tessera_container_region_readable 1 when the agent can read the container's shared region, 0 when it is of another layout version or corrupt; absent for a container without the region volume (its region is in its /dev/shm).
# TYPE tessera_container_region_readable gauge
tessera_container_region_readable{container="claim-c1",namespace="ns",node="n1",pod="train"} 1
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "tessera_card_assigned_memory_bytes",
		"tessera_container_gpu_memory_limit_bytes", "tessera_container_gpu_memory_used_bytes", "tessera_container_queue_info",
		"tessera_container_region_readable"); err != nil {
		t.Error(err)
	}
}
