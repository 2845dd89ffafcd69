// Package dracost reads what ResourceClaims of Tessera's DRA driver (vgpu.tessera.io)
// hold and ask of the cards, for the scheduler plugin's card book and queue shares. It
// is pure: claims in, cards and amounts out, no session and no API calls.
//
// Allocated claims are read as hostile-ish input, with the node agent's rules
// (deviceplugin/dra, allocation.go): a result names a device "card-<index>" that the
// node's inventory holds, consumes whole MiB of memory (above zero, at most the card)
// and whole percent of cores (0 to 100), and a result without consumed capacity is the
// whole card. Where the agent refuses a claim, the scheduler cannot: the claim is already
// allocated. A result that breaks a rule is left out of the count, with a Skip that names
// the field, the value as written and a reason category; nothing panics.
package dracost

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Names the node agent's driver publishes (deviceplugin/dra, model.go); the chart
// installs the DeviceClass under the driver's name.
const (
	Driver         = api.DRADriver
	Class          = api.DRADriver
	CapacityMemory = api.DRACapacityMemory
	CapacityCores  = api.DRACapacityCores
	MaxCores       = api.DRAMaxCores
)

// ErrNotCounted is wrapped by every error about a claim result left out of the count.
var ErrNotCounted = errors.New("DRA claim result not counted")

// Reasons a result is left out, for logs and counts.
const (
	ReasonUnknownNode   = "unknown node"
	ReasonUnknownDevice = "unknown device"
	ReasonBadCapacity   = "bad capacity"
	ReasonAdminAccess   = "admin access"
	ReasonCardTwice     = "card twice"
)

// Share is one card an allocated claim holds, and how much of it.
type Share struct {
	Node      string
	UUID      string
	Index     int
	MemoryMiB int64
	Cores     int
}

// Skip is a result left out of the count: Reason is one of the Reason constants, Err
// names the claim, the field and the value as written.
type Skip struct {
	Reason string
	Err    error
}

// Cards returns a node's cards (its inventory) and whether the node serves Tessera's
// DRA driver at all.
type Cards func(node string) ([]api.Card, bool)

// Held reads the allocation results of claim that name Tessera's driver: the shares it
// holds, and the results left out. A claim that is not allocated holds nothing.
func Held(claim *resourceapi.ResourceClaim, cards Cards) ([]Share, []Skip) {
	if claim == nil || claim.Status.Allocation == nil {
		return nil, nil
	}
	where := fmt.Sprintf("claim %s/%s", claim.Namespace, claim.Name)
	var out []Share
	var skips []Skip
	skip := func(reason, format string, args ...any) {
		skips = append(skips, Skip{Reason: reason, Err: fmt.Errorf("%w: "+format, append([]any{ErrNotCounted}, args...)...)})
	}
	seen := map[string]int{}
	for i, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != Driver {
			continue
		}
		field := fmt.Sprintf("%s: status.allocation.devices.results[%d]", where, i)
		inv, ok := cards(r.Pool)
		if !ok {
			skip(ReasonUnknownNode, "%s.pool: %q is not a node whose cards are DRA devices", field, r.Pool)
			continue
		}
		card, ok := cardNamed(inv, r.Device)
		if !ok {
			skip(ReasonUnknownDevice, "%s.device: %q is not a card node %s publishes", field, r.Device, r.Pool)
			continue
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			skip(ReasonAdminAccess, "%s.adminAccess: true is not supported by %s", field, Driver)
			continue
		}
		key := r.Pool + "/" + r.Device
		if prev, dup := seen[key]; dup {
			skip(ReasonCardTwice, "%s.device: %q is also results[%d]: one claim gets one share of a card", field, r.Device, prev)
			continue
		}
		seen[key] = i
		s := Share{Node: r.Pool, UUID: card.UUID, Index: card.Index, MemoryMiB: card.MemoryMiB, Cores: MaxCores}
		if len(r.ConsumedCapacity) > 0 {
			var err error
			if s.MemoryMiB, s.Cores, err = consumed(r.ConsumedCapacity, card, field+".consumedCapacity"); err != nil {
				skips = append(skips, Skip{Reason: ReasonBadCapacity, Err: err})
				continue
			}
		}
		out = append(out, s)
	}
	return out, skips
}

// Sum is what shares hold together, as the queue shares count it.
func Sum(shares []Share) fairshare.Amount {
	var a fairshare.Amount
	for _, s := range shares {
		a.MemoryMiB += float64(s.MemoryMiB)
		a.Cores += float64(s.Cores)
	}
	return a
}

// ReservedPods are the UIDs of the pods a claim is reserved for, in the order the
// claim lists them.
func ReservedPods(claim *resourceapi.ResourceClaim) []types.UID {
	var out []types.UID
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" && r.UID != "" {
			out = append(out, r.UID)
		}
	}
	return out
}

// cardNamed finds the card a device name "card-<index>" names, written exactly as the
// agent writes it; MIG cards are not published.
func cardNamed(cards []api.Card, device string) (api.Card, bool) {
	s, ok := strings.CutPrefix(device, "card-")
	if !ok {
		return api.Card{}, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return api.Card{}, false
	}
	for _, c := range cards {
		if c.Index == n && !c.MIG {
			return c, true
		}
	}
	return api.Card{}, false
}

// consumed reads a result's consumed memory (MiB) and cores and checks them against
// the card, as the agent does.
func consumed(cc map[resourceapi.QualifiedName]resource.Quantity, card api.Card, field string) (int64, int, error) {
	mib, cores, err := api.DRAConsumedShare(cc, card, field)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrNotCounted, err)
	}
	return mib, cores, nil
}
