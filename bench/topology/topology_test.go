package topology

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement"
)

// machine is one benchmark topology and the request sizes run on it.
type machine struct {
	name  string
	inv   *api.NodeInventory
	sizes []int
}

func machines() []machine {
	return []machine{
		{"dgx-a100", inventory(8, func(i, j int) api.LinkType { return "NV12" }), []int{1, 2, 3, 4, 6, 8}},
		{"dgx-1", inventory(8, dgx1), []int{1, 2, 3, 4, 6, 8}},
		{"pcie-pairs-4", inventory(4, pciePairs), []int{1, 2, 3, 4}},
		{"two-socket-16", inventory(16, twoSocket), []int{1, 2, 4, 8, 16}},
		{"nvswitch-16", inventory(16, func(i, j int) api.LinkType { return "NV18" }), []int{1, 2, 4, 8, 16}},
	}
}

// BenchmarkAllocators runs both allocators on every machine and request size with
// every card free. Besides time per call it reports the chosen set's total link
// score (go-gpuallocator's pair scores summed over the set, the scale both use)
// and, for Tessera, the p99 latency over the run.
func BenchmarkAllocators(b *testing.B) {
	for _, m := range machines() {
		node := placement.NewNode(m.name, m.inv, 1)
		free := make([]int, len(m.inv.Cards))
		for i := range free {
			free[i] = i
		}
		devices := gpuDevices(m.inv)
		for _, k := range m.sizes {
			b.Run(fmt.Sprintf("%s/k=%d/tessera", m.name, k), func(b *testing.B) {
				var set []int
				times := make([]time.Duration, 0, b.N)
				for i := 0; i < b.N; i++ {
					start := time.Now()
					set, _ = node.PreferredCards(free, nil, k)
					times = append(times, time.Since(start))
				}
				b.ReportMetric(float64(placement.LinkTotal(m.inv.Links, set)), "link-score")
				b.ReportMetric(float64(p99(times).Nanoseconds()), "p99-ns")
			})
			b.Run(fmt.Sprintf("%s/k=%d/go-gpuallocator", m.name, k), func(b *testing.B) {
				policy := gpuallocator.NewBestEffortPolicy()
				var got []*gpuallocator.Device
				for i := 0; i < b.N; i++ {
					got = policy.Allocate(devices, nil, k)
				}
				set := make([]int, len(got))
				for i, d := range got {
					set[i] = d.Index
				}
				sort.Ints(set)
				b.ReportMetric(float64(placement.LinkTotal(m.inv.Links, set)), "link-score")
			})
		}
	}
}

func p99(times []time.Duration) time.Duration {
	sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
	return times[len(times)*99/100]
}

// gpuDevices describes the inventory to go-gpuallocator: one link per pair, of the
// type our matrix holds, so that its pair scores equal placement.LinkScore.
func gpuDevices(inv *api.NodeInventory) []*gpuallocator.Device {
	devs := make([]*gpuallocator.Device, len(inv.Cards))
	for i, c := range inv.Cards {
		devs[i] = &gpuallocator.Device{Index: i, Links: map[int][]gpuallocator.P2PLink{}}
		devs[i].UUID = c.UUID
	}
	for i := range devs {
		for j := range devs {
			if i == j {
				continue
			}
			link := gpuallocator.P2PLink{GPU: devs[j]}
			// The link type is declared in an internal package of go-gpuallocator;
			// reflection sets the value without naming the type.
			reflect.ValueOf(&link).Elem().FieldByName("Type").SetUint(p2pType(inv.Links[i][j]))
			devs[i].Links[j] = []gpuallocator.P2PLink{link}
		}
	}
	return devs
}

// p2pType is go-gpuallocator's P2PLinkType value for a link: CrossCPU = 1 up to
// SameBoard = 6, then one value per NVLink count from SingleNVLINKLink = 7.
func p2pType(l api.LinkType) uint64 {
	if n, ok := l.NVLinks(); ok {
		return uint64(6 + n)
	}
	switch l {
	case api.LinkCrossNUMA:
		return 1
	case api.LinkSameNUMA:
		return 2
	case api.LinkHostBridge:
		return 3
	case api.LinkPCIeMulti:
		return 4
	case api.LinkPCIeSingle:
		return 5
	case api.LinkSameBoard:
		return 6
	}
	return 0
}

// TestPairScoresAgree checks the translation: go-gpuallocator orders every link
// type as placement.LinkScore does, so the two totals are comparable. Of three cards
// whose pair (0, 1) has the better link, it must choose that pair, and never when
// that pair has the worse one.
func TestPairScoresAgree(t *testing.T) {
	order := []api.LinkType{"NV18", "NV12", "NV2", "NV1", api.LinkSameBoard, api.LinkPCIeSingle, api.LinkPCIeMulti,
		api.LinkHostBridge, api.LinkSameNUMA, api.LinkCrossNUMA}
	for i := 0; i+1 < len(order); i++ {
		better, worse := order[i], order[i+1]
		if placement.LinkScore(better) <= placement.LinkScore(worse) {
			t.Fatalf("placement scores %s (%d) no higher than %s (%d)", better, placement.LinkScore(better), worse, placement.LinkScore(worse))
		}
		for _, tc := range []struct {
			pair, rest api.LinkType
			want       bool
		}{{better, worse, true}, {worse, better, false}} {
			inv := inventory(3, func(i, j int) api.LinkType {
				if i == 0 && j == 1 {
					return tc.pair
				}
				return tc.rest
			})
			got := indices(gpuallocator.NewBestEffortPolicy().Allocate(gpuDevices(inv), nil, 2))
			if chose := fmt.Sprint(got) == "[0 1]"; chose != tc.want {
				t.Fatalf("pair %s, others %s: go-gpuallocator chose %v", tc.pair, tc.rest, got)
			}
		}
	}
}

func indices(ds []*gpuallocator.Device) []int {
	var out []int
	for _, d := range ds {
		out = append(out, d.Index)
	}
	sort.Ints(out)
	return out
}
