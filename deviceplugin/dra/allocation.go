package dra

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/api"
)

// ErrInvalidClaim is wrapped by every error about what a ResourceClaim's allocation asks
// of this driver. A claim's allocation is written by a scheduler, but the agent checks it
// as hostile input: a share it cannot prove fits the card is refused, never clamped.
var ErrInvalidClaim = errors.New("invalid resource claim")

// Share is one allocated device of a claim: a card and what the claim may use of it.
type Share struct {
	// Request is the allocation result's request (<request> or <request>/<subrequest>).
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	UUID    string `json:"uuid"`
	// Index is the card's NVML index; shares are kept in index order, the CUDA ordinal
	// order the limits file lists them in.
	Index     int   `json:"index"`
	MemoryMiB int64 `json:"memoryMiB"`
	Cores     int   `json:"cores"`
}

// ClaimShares reads the allocation results of claim that name this driver and returns
// one share per result, in card index order. cards are the node's cards (by NVML index);
// pool is this node's pool. Results for other drivers are skipped: the kubelet sends a
// claim to every driver it names. A result without consumed capacity (a scheduler that
// does not know consumable capacity) gets the whole card.
func ClaimShares(claim *resourceapi.ResourceClaim, pool string, cards []api.Card) ([]Share, error) {
	where := fmt.Sprintf("claim %s/%s", claim.Namespace, claim.Name)
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("%w: %s: status.allocation: missing (the claim is not allocated)", ErrInvalidClaim, where)
	}
	byName := make(map[string]api.Card, len(cards))
	for _, c := range cards {
		if !c.MIG {
			byName[DeviceName(c.Index)] = c
		}
	}
	var out []Share
	seen := map[string]int{}
	for i, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		field := fmt.Sprintf("%s: status.allocation.devices.results[%d]", where, i)
		if r.Pool != pool {
			return nil, fmt.Errorf("%w: %s.pool: %q is not this node's pool %q", ErrInvalidClaim, field, r.Pool, pool)
		}
		card, ok := byName[r.Device]
		if !ok {
			return nil, fmt.Errorf("%w: %s.device: %q is not a device this node publishes", ErrInvalidClaim, field, r.Device)
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			return nil, fmt.Errorf("%w: %s.adminAccess: true is not supported by %s", ErrInvalidClaim, field, DriverName)
		}
		if prev, dup := seen[r.Device]; dup {
			return nil, fmt.Errorf("%w: %s.device: %q is also results[%d]: one claim gets one share of a card (vgpu-core takes one limit per card)",
				ErrInvalidClaim, field, r.Device, prev)
		}
		seen[r.Device] = i
		s := Share{Request: r.Request, Pool: r.Pool, Device: r.Device, UUID: card.UUID, Index: card.Index,
			MemoryMiB: card.MemoryMiB, Cores: MaxCores}
		if len(r.ConsumedCapacity) > 0 {
			var err error
			if s.MemoryMiB, s.Cores, err = consumed(r.ConsumedCapacity, card, field+".consumedCapacity"); err != nil {
				return nil, err
			}
		}
		out = append(out, s)
	}
	sortShares(out)
	return out, nil
}

// consumed reads a result's consumed memory and cores and checks them against the card.
func consumed(cc map[resourceapi.QualifiedName]resource.Quantity, card api.Card, field string) (int64, int, error) {
	mib, cores, err := api.DRAConsumedShare(cc, card, field)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalidClaim, err)
	}
	return mib, cores, nil
}

func sortShares(s []Share) {
	slices.SortStableFunc(s, func(a, b Share) int { return a.Index - b.Index })
}

// parseDeviceName is DeviceName's inverse, for the spelling DeviceName writes only.
func parseDeviceName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "card-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}
