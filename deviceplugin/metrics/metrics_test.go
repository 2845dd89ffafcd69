package metrics

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

type livePods map[types.UID]bool

// Get knows one pod's queue: the live pod is a VolcanoJob's, in queue "research".
func (l livePods) Get(_, name string) (*corev1.Pod, bool) {
	if name != "live" {
		return nil, false
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"volcano.sh/queue-name": "research"}}}, true
}

func (l livePods) Exists(uid types.UID) bool { return l[uid] }
func (l livePods) Synced() bool              { return true }

// fixture is a node with two cards and containers of three pods: u1 (live, started, its
// region written as vgpu-core would), u2 (gone), u3 (live, started, no region: the hook
// library never loaded).
func fixture(t *testing.T) (*cards.Registry, *records.Store) {
	t.Helper()
	reg := cards.NewRegistry([]api.Card{
		{UUID: "GPU-a", Index: 0, Model: "L4", MemoryMiB: 23034, NUMA: 0, Shares: 4, Healthy: true},
		{UUID: "GPU-b", Index: 1, Model: "L4", MemoryMiB: 23034, NUMA: 0, Shares: 4, Healthy: true},
	}, nil)
	reg.SetHealth("GPU-b", false, "test")
	store := &records.Store{Root: t.TempDir()}
	started := time.Unix(1700000000, 0)
	for _, r := range []records.Record{
		{Namespace: "ns", Pod: "live", UID: "u1", Container: "c", SlotIDs: []string{"GPU-a::0", "GPU-b::0"},
			Cards: []api.CardAssignment{{UUID: "GPU-b", MemoryMiB: 1000, Cores: 100}, {UUID: "GPU-a", MemoryMiB: 3000, Cores: 30}},
			QoS:   api.QoSFixedShare, Started: &started, RegionVolume: true},
		{Namespace: "ns", Pod: "gone", UID: "u2", Container: "c", SlotIDs: []string{"GPU-a::1"},
			Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 5000, Cores: 0}}, QoS: api.QoSFixedShare, RegionVolume: true},
		{Namespace: "ns", Pod: "nohook", UID: "u3", Container: "c", SlotIDs: []string{"GPU-a::2"},
			Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 1000, Cores: 10}}, QoS: api.QoSFixedShare, Started: &started,
			RegionVolume: true},
	} {
		if err := store.Prepare(&r, "version=1\n"); err != nil {
			t.Fatal(err)
		}
		if r.Started != nil {
			if err := store.MarkStarted(&r, *r.Started); err != nil {
				t.Fatal(err)
			}
		}
	}
	// u1's region: ordinal 0 is GPU-b, ordinal 1 is GPU-a (the record's order). Two
	// processes (pids 7 and 8, started one tick after boot: neither runs here), counted
	// as alive or not depending on whether the agent sees the host's processes.
	r := &usage.Region{Version: usage.LayoutVersion}
	r.Cards[1] = usage.Card{UsedBytes: 1 << 30, Capped: true, UtilPercent: 27, ChargedNanos: 1e9}
	r.Procs = []usage.Proc{
		{Slot: 0, PID: 7, StartTime: 1, Used: [usage.MaxCards]uint64{0: 0, 1: 512 << 20}},
		{Slot: 1, PID: 8, StartTime: 1, Used: [usage.MaxCards]uint64{0: 100 << 20, 1: 512 << 20}},
	}
	b, err := usage.Encode(r)
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(regionOf(t, store, "u1"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return reg, store
}

func TestMetricsReportCardsAndTheContainersOfLivePodsOnly(t *testing.T) {
	reg, store := fixture(t)
	promReg := prometheus.NewPedanticRegistry()
	// A procfs that is not the host's: every registered process counts as alive.
	m := New(promReg, Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: livePods{"u1": true, "u3": true}, ProcRoot: t.TempDir()})
	m.ObserveCall("Allocate", nil, time.Millisecond)
	m.ObserveCall("Allocate", errors.New("refused"), time.Millisecond)
	want := `
# HELP tessera_card_assigned_memory_bytes Memory limits of the containers set up on the card.
# TYPE tessera_card_assigned_memory_bytes gauge
tessera_card_assigned_memory_bytes{index="0",model="L4",node="n1",uuid="GPU-a"} 4.194304e+09
tessera_card_assigned_memory_bytes{index="1",model="L4",node="n1",uuid="GPU-b"} 1.048576e+09
# HELP tessera_card_healthy 1 when the card is healthy, 0 when not.
# TYPE tessera_card_healthy gauge
tessera_card_healthy{index="0",model="L4",node="n1",uuid="GPU-a"} 1
tessera_card_healthy{index="1",model="L4",node="n1",uuid="GPU-b"} 0
# HELP tessera_container_gpu_sm_limit_ratio A container's SM limit on one of its cards, as a share of the card (1 = uncapped).
# TYPE tessera_container_gpu_sm_limit_ratio gauge
tessera_container_gpu_sm_limit_ratio{container="c",index="0",namespace="ns",node="n1",pod="live",uuid="GPU-a"} 0.3
tessera_container_gpu_sm_limit_ratio{container="c",index="0",namespace="ns",node="n1",pod="nohook",uuid="GPU-a"} 0.1
tessera_container_gpu_sm_limit_ratio{container="c",index="1",namespace="ns",node="n1",pod="live",uuid="GPU-b"} 1
# HELP tessera_container_gpu_memory_used_bytes Device memory the container's live processes hold on the card, read from vgpu-core's shared region.
# TYPE tessera_container_gpu_memory_used_bytes gauge
tessera_container_gpu_memory_used_bytes{container="c",index="0",namespace="ns",node="n1",pod="live",uuid="GPU-a"} 1.073741824e+09
tessera_container_gpu_memory_used_bytes{container="c",index="1",namespace="ns",node="n1",pod="live",uuid="GPU-b"} 1.048576e+08
# HELP tessera_container_gpu_sm_utilization_ratio Share of the card's SMs the container was charged over vgpu-core's last one-second period (SM-limited cards only).
# TYPE tessera_container_gpu_sm_utilization_ratio gauge
tessera_container_gpu_sm_utilization_ratio{container="c",index="0",namespace="ns",node="n1",pod="live",uuid="GPU-a"} 0.27
# HELP tessera_container_hook_loaded 1 when vgpu-core initialised the started container's shared region (the hook library loaded), 0 when not.
# TYPE tessera_container_hook_loaded gauge
tessera_container_hook_loaded{container="c",namespace="ns",node="n1",pod="live"} 1
tessera_container_hook_loaded{container="c",namespace="ns",node="n1",pod="nohook"} 0
# HELP tessera_container_queue_info 1 for every vGPU container, labelled with its Volcano queue (the pod's volcano.sh/queue-name label; empty when it has none): join on namespace, pod, container to sum use by queue.
# TYPE tessera_container_queue_info gauge
tessera_container_queue_info{container="c",namespace="ns",node="n1",pod="live",queue="research"} 1
tessera_container_queue_info{container="c",namespace="ns",node="n1",pod="nohook",queue=""} 1
# HELP tessera_kubelet_calls_total Kubelet device plugin calls by call and result (ok or refused).
# TYPE tessera_kubelet_calls_total counter
tessera_kubelet_calls_total{call="Allocate",node="n1",result="ok"} 1
tessera_kubelet_calls_total{call="Allocate",node="n1",result="refused"} 1
`
	err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "tessera_card_assigned_memory_bytes", "tessera_card_healthy",
		"tessera_container_gpu_sm_limit_ratio", "tessera_container_gpu_memory_used_bytes", "tessera_container_gpu_sm_utilization_ratio",
		"tessera_container_hook_loaded", "tessera_container_queue_info", "tessera_kubelet_calls_total")
	if err != nil {
		t.Error(err)
	}
}

func TestMetricsLeaveOutProcessesTheHostSaysAreGone(t *testing.T) {
	if !usage.SeesHostPIDs("/proc") {
		t.Skip("this test process is not in the host's pid namespace, so it cannot judge host processes")
	}
	reg, store := fixture(t)
	promReg := prometheus.NewPedanticRegistry()
	New(promReg, Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: livePods{"u1": true}})
	want := `
# HELP tessera_container_gpu_memory_used_bytes Device memory the container's live processes hold on the card, read from vgpu-core's shared region.
# TYPE tessera_container_gpu_memory_used_bytes gauge
tessera_container_gpu_memory_used_bytes{container="c",index="0",namespace="ns",node="n1",pod="live",uuid="GPU-a"} 0
tessera_container_gpu_memory_used_bytes{container="c",index="1",namespace="ns",node="n1",pod="live",uuid="GPU-b"} 0
# HELP tessera_container_gpu_processes Live processes registered in the container's shared region.
# TYPE tessera_container_gpu_processes gauge
tessera_container_gpu_processes{container="c",namespace="ns",node="n1",pod="live"} 0
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "tessera_container_gpu_memory_used_bytes",
		"tessera_container_gpu_processes"); err != nil {
		t.Error(err)
	}
}

func TestLastPublishTimestamp(t *testing.T) {
	reg, store := fixture(t)
	promReg := prometheus.NewPedanticRegistry()
	m := New(promReg, Sources{Node: "n1", Cards: reg, Store: store, KubeletPodsDir: kubeletPods(store), Pods: livePods{}})
	m.now = func() time.Time { return time.Unix(1700000000, 500e6) }
	m.ObservePublish(nil, time.Millisecond)
	m.now = func() time.Time { return time.Unix(1800000000, 0) }
	m.ObservePublish(errors.New("conflict"), time.Millisecond)
	if got := testutil.ToFloat64(m.lastPublish); got != 1700000000.5 {
		t.Errorf("last publish = %v, want the time of the last successful write", got)
	}
}

// A container given a whole MIG instance keeps its series under the parent card's UUID,
// as every container does, and gains one info series naming the MIG device and its
// profile; containers without one get none. The card's assigned cores count the
// instance's share of the card's SMs (66 of 132), not 100%.
func TestAMIGContainerIsReportedUnderItsCardWithItsMIGDevice(t *testing.T) {
	reg := cards.NewRegistry([]api.Card{
		{UUID: "GPU-a", Index: 0, Model: "H100", MemoryMiB: 81559, SMCount: 132, NUMA: 0, Shares: 4, Healthy: true, MIG: true,
			MIGInstances: []api.MIGInstance{{UUID: "MIG-a1", Profile: "3g.40gb", GI: 1, Start: 4, Size: 4, MemoryMiB: 40448, SMCount: 66}}},
		{UUID: "GPU-b", Index: 1, Model: "H100", MemoryMiB: 81559, NUMA: 0, Shares: 4, Healthy: true},
	}, nil)
	store := &records.Store{Root: t.TempDir()}
	for _, r := range []records.Record{
		{Namespace: "ns", Pod: "live", UID: "u1", Container: "c", SlotIDs: []string{"GPU-a::0"},
			Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 40448, Cores: 100, MIG: "MIG-a1"}}, QoS: api.QoSFixedShare},
		{Namespace: "ns", Pod: "live", UID: "u1", Container: "d", SlotIDs: []string{"GPU-b::0"},
			Cards: []api.CardAssignment{{UUID: "GPU-b", MemoryMiB: 1000, Cores: 10}}, QoS: api.QoSFixedShare},
	} {
		if err := store.Prepare(&r, "version=1\n"); err != nil {
			t.Fatal(err)
		}
	}
	promReg := prometheus.NewPedanticRegistry()
	New(promReg, Sources{Node: "n1", Cards: reg, Store: store, Pods: livePods{"u1": true}, ProcRoot: t.TempDir()})
	want := `
# HELP tessera_card_assigned_memory_bytes Memory limits of the containers set up on the card.
# TYPE tessera_card_assigned_memory_bytes gauge
tessera_card_assigned_memory_bytes{index="0",model="H100",node="n1",uuid="GPU-a"} 4.2412802048e+10
tessera_card_assigned_memory_bytes{index="1",model="H100",node="n1",uuid="GPU-b"} 1.048576e+09
# HELP tessera_card_assigned_cores_ratio Sum of the SM limits of the containers set up on the card, as a share of the card (0-1 when not over-committed).
# TYPE tessera_card_assigned_cores_ratio gauge
tessera_card_assigned_cores_ratio{index="0",model="H100",node="n1",uuid="GPU-a"} 0.5
tessera_card_assigned_cores_ratio{index="1",model="H100",node="n1",uuid="GPU-b"} 0.1
# HELP tessera_container_gpu_memory_limit_bytes A container's memory limit on one of its cards.
# TYPE tessera_container_gpu_memory_limit_bytes gauge
tessera_container_gpu_memory_limit_bytes{container="c",index="0",namespace="ns",node="n1",pod="live",uuid="GPU-a"} 4.2412802048e+10
tessera_container_gpu_memory_limit_bytes{container="d",index="1",namespace="ns",node="n1",pod="live",uuid="GPU-b"} 1.048576e+09
# HELP tessera_container_mig_device_info 1 for every whole MIG instance a container was given, labelled with its parent card (uuid, index, as on the container's other series) and the MIG device (mig, profile): join on namespace, pod, container, uuid.
# TYPE tessera_container_mig_device_info gauge
tessera_container_mig_device_info{container="c",index="0",mig="MIG-a1",namespace="ns",node="n1",pod="live",profile="3g.40gb",uuid="GPU-a"} 1
`
	if err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "tessera_card_assigned_memory_bytes",
		"tessera_card_assigned_cores_ratio", "tessera_container_gpu_memory_limit_bytes", "tessera_container_mig_device_info"); err != nil {
		t.Error(err)
	}
}
