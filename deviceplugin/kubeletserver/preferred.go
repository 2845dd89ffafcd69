package kubeletserver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/placement"
)

// preferred answers GetPreferredAllocation for one container. A container the
// scheduler assigned gets exactly its cards, from the handler; only when no pending
// container is waiting for these slots (a pod Tessera did not place, so there is no
// assignment to follow) do the slots come from the shared placement package,
// so the kubelet's choice is at least link- and NUMA-aware and, as the scheduler's
// would be, off cordoned cards. Allocate still decides whether such a pod may have
// the cards (the handoff refuses every container without an assignment).
func (s *Server) preferred(ctx context.Context, req *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	ids, err := s.handler.Preferred(ctx, req)
	if err == nil || !errors.Is(err, handoff.ErrNoPendingContainer) {
		return ids, err
	}
	inv, terr := s.cordons.apply(s.reg.Inventory())
	if terr == nil {
		ids, terr = PreferWholeCards(inv, req.GetAvailableDeviceIDs(), req.GetMustIncludeDeviceIDs(), int(req.GetAllocationSize()))
	}
	if terr != nil {
		return nil, fmt.Errorf("%w; topology fallback: %v", err, terr)
	}
	klog.V(4).InfoS("No assignment to follow; preferring slots by topology", "slots", ids)
	return ids, nil
}

// PreferWholeCards chooses size slots on size distinct cards, one slot per card as
// the scheduler's contract has it, preferring idle cards (all of their slots
// available) and among those the best-linked set package placement finds. Must-include
// slots are kept. A cordoned card (Card.Cordon) is never chosen unless a must-include
// slot is on it; when the uncordoned cards are too few the error names the cordoned
// ones with their reasons.
func PreferWholeCards(inv *api.NodeInventory, available, must []string, size int) ([]string, error) {
	index := make(map[string]int, len(inv.Cards))
	for i, c := range inv.Cards {
		index[c.UUID] = i
	}
	slots := map[int][]string{} // card index -> available slots, lowest first
	for _, id := range available {
		uuid, _, err := cards.ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		i, ok := index[uuid]
		if !ok {
			return nil, fmt.Errorf("%w: %q names no card of this node", cards.ErrUnknownSlot, id)
		}
		slots[i] = append(slots[i], id)
	}
	mustCard := map[int]string{}
	for _, id := range must {
		uuid, _, err := cards.ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		i, ok := index[uuid]
		if !ok {
			return nil, fmt.Errorf("%w: must-include slot %q names no card of this node", cards.ErrUnknownSlot, id)
		}
		if _, dup := mustCard[i]; dup {
			return nil, fmt.Errorf("%w: must-include slot %q", cards.ErrSameCardTwice, id)
		}
		mustCard[i] = id
	}
	var idle, free, mustIdx []int
	var cordoned []string
	for i, ids := range slots {
		sort.Strings(ids)
		if c := inv.Cards[i].Cordon; c != nil {
			if _, kept := mustCard[i]; !kept {
				cordoned = append(cordoned, placement.CordonedText(inv.Cards[i].UUID, c.Reason))
				continue
			}
		}
		free = append(free, i)
		if len(ids) >= inv.Cards[i].Shares {
			idle = append(idle, i)
		}
	}
	for i := range mustCard {
		mustIdx = append(mustIdx, i)
	}
	node := placement.NewNode("", inv, 1)
	chosen, ok := node.PreferredCards(withAll(idle, mustIdx), mustIdx, size)
	if !ok {
		chosen, ok = node.PreferredCards(free, mustIdx, size)
	}
	if !ok && len(cordoned) > 0 {
		sort.Strings(cordoned)
		return nil, fmt.Errorf("%w: %d slots on distinct cards wanted, %d uncordoned cards have a free slot (%s)",
			ErrCordoned, size, len(free), strings.Join(cordoned, "; "))
	}
	if !ok {
		return nil, fmt.Errorf("%d slots on distinct cards wanted, %d cards have a free slot", size, len(free))
	}
	out := make([]string, 0, size)
	for _, i := range chosen {
		if id, ok := mustCard[i]; ok {
			out = append(out, id)
		} else {
			out = append(out, slots[i][0])
		}
	}
	return out, nil
}

// withAll is set plus the members of extra it lacks.
func withAll(set, extra []int) []int {
	out := append([]int(nil), set...)
	for _, x := range extra {
		found := false
		for _, y := range set {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}
