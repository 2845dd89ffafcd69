package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
)

type livePods map[types.UID]bool

func (l livePods) Get(string, string) (*corev1.Pod, bool) { return nil, false }
func (l livePods) Exists(uid types.UID) bool              { return l[uid] }
func (l livePods) Synced() bool                           { return true }

func TestMetricsReportCardsAndTheContainersOfLivePodsOnly(t *testing.T) {
	reg := cards.NewRegistry([]api.Card{
		{UUID: "GPU-a", Index: 0, Model: "L4", MemoryMiB: 23034, NUMA: 0, Shares: 4, Healthy: true},
		{UUID: "GPU-b", Index: 1, Model: "L4", MemoryMiB: 23034, NUMA: 0, Shares: 4, Healthy: true},
	}, nil)
	reg.SetHealth("GPU-b", false, "test")
	store := &records.Store{Root: t.TempDir()}
	for _, r := range []records.Record{
		{Namespace: "ns", Pod: "live", UID: "u1", Container: "c", SlotIDs: []string{"GPU-a::0"},
			Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 3000, Cores: 30}}, QoS: api.QoSFixedShare},
		{Namespace: "ns", Pod: "gone", UID: "u2", Container: "c", SlotIDs: []string{"GPU-a::1"},
			Cards: []api.CardAssignment{{UUID: "GPU-a", MemoryMiB: 5000, Cores: 0}}, QoS: api.QoSFixedShare},
	} {
		r := r
		if err := store.Prepare(&r, "version=1\n"); err != nil {
			t.Fatal(err)
		}
	}
	promReg := prometheus.NewPedanticRegistry()
	m := New(promReg, Sources{Cards: reg, Store: store, Pods: livePods{"u1": true}})
	m.ObserveCall("Allocate", nil, time.Millisecond)
	m.ObserveCall("Allocate", errors.New("refused"), time.Millisecond)
	want := `
# HELP tessera_card_assigned_memory_mib Memory limits of the containers set up on the card.
# TYPE tessera_card_assigned_memory_mib gauge
tessera_card_assigned_memory_mib{index="0",model="L4",uuid="GPU-a"} 3000
tessera_card_assigned_memory_mib{index="1",model="L4",uuid="GPU-b"} 0
# HELP tessera_card_healthy 1 when the card is healthy, 0 when not.
# TYPE tessera_card_healthy gauge
tessera_card_healthy{index="0",model="L4",uuid="GPU-a"} 1
tessera_card_healthy{index="1",model="L4",uuid="GPU-b"} 0
# HELP tessera_container_sm_limit_percent A container's SM limit on one of its cards (100 = uncapped).
# TYPE tessera_container_sm_limit_percent gauge
tessera_container_sm_limit_percent{container="c",namespace="ns",pod="live",uuid="GPU-a"} 30
# HELP tessera_kubelet_calls_total Kubelet device plugin calls by call and result (ok or refused).
# TYPE tessera_kubelet_calls_total counter
tessera_kubelet_calls_total{call="Allocate",result="ok"} 1
tessera_kubelet_calls_total{call="Allocate",result="refused"} 1
`
	err := testutil.GatherAndCompare(promReg, strings.NewReader(want), "tessera_card_assigned_memory_mib", "tessera_card_healthy",
		"tessera_container_sm_limit_percent", "tessera_kubelet_calls_total")
	if err != nil {
		t.Error(err)
	}
}
