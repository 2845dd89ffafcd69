package cards

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnknownSlot is wrapped when a kubelet device ID is not one this agent advertises.
var ErrUnknownSlot = errors.New("unknown device slot")

// slotSeparator cannot occur in a card UUID (api.validateUUID allows [A-Za-z0-9._-]),
// so a slot ID always splits back into exactly one card and one index.
const slotSeparator = "::"

// SlotID names share k of a card. The kubelet only ever sees these IDs; because each
// names its card, the cards a container gets follow from its IDs alone.
func SlotID(uuid string, k int) string {
	return uuid + slotSeparator + strconv.Itoa(k)
}

// ParseSlotID splits a slot ID into its card UUID and share index.
func ParseSlotID(id string) (string, int, error) {
	i := strings.LastIndex(id, slotSeparator)
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: %q has no %q", ErrUnknownSlot, id, slotSeparator)
	}
	idx := id[i+len(slotSeparator):]
	k, err := strconv.Atoi(idx)
	// Only the spelling SlotID writes: "+1", "01" or "-0" name no slot this agent advertised.
	if err != nil || k < 0 || strconv.Itoa(k) != idx {
		return "", 0, fmt.Errorf("%w: %q: share index is not a non-negative number as the agent writes it", ErrUnknownSlot, id)
	}
	return id[:i], k, nil
}
