package kubeletserver

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/api"

	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// fixedHandler answers Preferred with ids or err.
type fixedHandler struct {
	ids []string
	err error
}

func (h fixedHandler) Preferred(context.Context, *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	return h.ids, h.err
}
func (fixedHandler) Allocate(context.Context, *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return nil, nil
}
func (fixedHandler) PreStart(context.Context, []string) error { return nil }

// fourCards is nvmlfake's 4-card machine: cards 0,1 and 2,3 NVLinked pairs on two
// NUMA nodes, two slots per card.
func fourCards(t *testing.T) *cards.Registry {
	res, err := discovery.Discover(nvmlfake.FourCardsTwoNUMA(), discovery.Options{Shares: 2})
	if err != nil {
		t.Fatal(err)
	}
	return cards.NewRegistry(res.Cards(), res.Links)
}

// slots lists every slot of the registry except those named in taken ("card:share").
func slots(reg *cards.Registry, taken ...string) []string {
	var out []string
	for _, s := range reg.Slots() {
		uuid, k, _ := cards.ParseSlotID(s.ID)
		skip := false
		for _, t := range taken {
			skip = skip || t == fmt.Sprintf("%d:%d", cardIndex(reg, uuid), k)
		}
		if !skip {
			out = append(out, s.ID)
		}
	}
	return out
}

func cardIndex(reg *cards.Registry, uuid string) int {
	for i, c := range reg.Inventory().Cards {
		if c.UUID == uuid {
			return i
		}
	}
	return -1
}

// cardsOf renders the card indices of slot IDs.
func cardsOf(reg *cards.Registry, ids []string) string {
	var out []string
	for _, id := range ids {
		uuid, _, _ := cards.ParseSlotID(id)
		out = append(out, fmt.Sprint(cardIndex(reg, uuid)))
	}
	return strings.Join(out, ",")
}

func TestPreferredAllocation(t *testing.T) {
	reg := fourCards(t)
	noAssignment := fmt.Errorf("%w: nothing waits", handoff.ErrNoPendingContainer)
	for _, tc := range []struct {
		name      string
		handler   fixedHandler
		taken     []string
		must      []string
		size      int
		wantCards string
		wantErr   string
	}{
		{"a scheduled container keeps exactly its handoff", fixedHandler{ids: []string{"x::0", "y::0"}}, nil, nil, 2, "-1,-1", ""},
		{"a handoff refusal other than no-assignment stands", fixedHandler{err: handoff.ErrAmbiguous}, nil, nil, 2, "", "cannot tell"},
		{"without an assignment a pair gets an NVLinked pair", fixedHandler{err: noAssignment}, nil, nil, 2, "0,1", ""},
		{"without an assignment a pair avoids a shared card", fixedHandler{err: noAssignment}, []string{"0:1"}, nil, 2, "2,3", ""},
		{"a single card leaves NVLinked pairs whole", fixedHandler{err: noAssignment}, []string{"2:0"}, nil, 1, "3", ""},
		{"a must-include slot is kept with its best partner", fixedHandler{err: noAssignment}, nil, []string{"3:1"}, 2, "2,3", ""},
		{"busy cards are used when idle ones are too few", fixedHandler{err: noAssignment}, []string{"0:0", "1:0", "2:0"}, nil, 4, "0,1,2,3", ""},
		{"too few cards are refused with both reasons", fixedHandler{err: noAssignment}, []string{"0:0", "0:1"}, nil, 4, "", "no pending container on this node matches: nothing waits; topology fallback: 4 slots on distinct cards wanted, 3 cards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{reg: reg, handler: tc.handler}
			s.ObserveNode(&corev1.Node{}) // no card cordoned
			var must []string
			for _, m := range tc.must {
				var c, k int
				fmt.Sscanf(m, "%d:%d", &c, &k)
				must = append(must, cards.SlotID(reg.Inventory().Cards[c].UUID, k))
			}
			ids, err := s.preferred(context.Background(), &pluginapi.ContainerPreferredAllocationRequest{
				AvailableDeviceIDs: slots(reg, tc.taken...), MustIncludeDeviceIDs: must, AllocationSize: int32(tc.size)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", ids, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cardsOf(reg, ids); got != tc.wantCards {
				t.Fatalf("slots %v on cards %s, want cards %s", ids, got, tc.wantCards)
			}
			for _, m := range must {
				if !strings.Contains(strings.Join(ids, " "), m) {
					t.Fatalf("must-include slot %s missing from %v", m, ids)
				}
			}
		})
	}
}

// From NVML to slots: the fake DGX A100's NVSwitch links and NUMA nodes, read by
// discovery, steer a 4-card request without an assignment onto one NUMA node.
func TestPreferredAllocationOnDiscoveredDGXA100(t *testing.T) {
	res, err := discovery.Discover(nvmlfake.DGXA100(), discovery.Options{Shares: 4})
	if err != nil {
		t.Fatal(err)
	}
	reg := cards.NewRegistry(res.Cards(), res.Links)
	if l := reg.Inventory().Links[0][7]; l != "NV12" {
		t.Fatalf("discovery reports %q between cards 0 and 7, want NV12", l)
	}
	// Card 1 has a slot taken: four idle cards remain on NUMA node 1 only.
	ids, err := PreferWholeCards(reg.Inventory(), slots(reg, "1:0"), nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := cardsOf(reg, ids); got != "4,5,6,7" {
		t.Fatalf("cards %s, want 4,5,6,7", got)
	}
}

// A must-include slot is the kubelet's to keep even on a cordoned card (it is already
// the pod's); the cordon still keeps the card's partner choice off other cordoned cards.
func TestAMustIncludeSlotOnACordonedCardIsKept(t *testing.T) {
	reg := fourCards(t)
	inv := reg.Inventory()
	cordons := &api.NodeCordons{Cards: map[string]api.CardCordon{
		inv.Cards[0].UUID: {Reason: "ECC errors"}, inv.Cards[1].UUID: {Reason: "ECC errors"}}}
	must := cards.SlotID(inv.Cards[0].UUID, 1)
	ids, err := PreferWholeCards(inv.WithCordons(cordons), slots(reg), []string{must}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := cardsOf(reg, ids); got != "0,2" {
		t.Fatalf("cards %s, want the must-include card 0 and an uncordoned partner (2)", got)
	}
}
