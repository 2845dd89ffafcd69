package api

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The node agent's DRA driver (deviceplugin/dra): its name, which is also the name of the
// DeviceClass the chart installs, and the two capacities each card publishes.
const (
	DRADriver                                  = "vgpu.tessera.io"
	DRACapacityMemory resourcev1.QualifiedName = "memory"
	DRACapacityCores  resourcev1.QualifiedName = "cores"
	// DRAMaxCores is the cores capacity of every card: percent of its SMs.
	DRAMaxCores = 100
)

// DRAConsumedShare reads what a DRA allocation result consumed on card (its
// consumedCapacity, cc) as the memory (MiB) and cores of a share, and checks them as the
// node agent must before it writes limits: both capacities present and nothing else,
// memory a whole number of MiB, not zero (vgpu-core reads a zero limit as unlimited) and
// at most the card's, cores a whole percent from 0 to 100. field names the result in the
// errors, which quote the value as written. The agent (deviceplugin/dra) and the
// scheduler's ledger (plugins/vgpu/dracost) both read results through it, so they never
// disagree about a claim. A result without consumed capacity (the whole card) is the
// callers' case.
func DRAConsumedShare(cc map[resourcev1.QualifiedName]resource.Quantity, card Card, field string) (memoryMiB int64, cores int, err error) {
	for name := range cc {
		if name != DRACapacityMemory && name != DRACapacityCores {
			return 0, 0, fmt.Errorf("%s: %q is not a capacity of %s (want %s and %s)", field, name, DRADriver,
				DRACapacityMemory, DRACapacityCores)
		}
	}
	mem, ok := cc[DRACapacityMemory]
	if !ok {
		return 0, 0, fmt.Errorf("%s: %s missing (the scheduler lists every capacity it consumed)", field, DRACapacityMemory)
	}
	f := fmt.Sprintf("%s[%s]", field, DRACapacityMemory)
	bytes, whole := wholeValue(mem)
	switch {
	case mem.Sign() < 0:
		return 0, 0, fmt.Errorf("%s: %q is negative", f, mem.String())
	case mem.Cmp(*resource.NewQuantity(card.MemoryMiB<<20, resource.BinarySI)) > 0:
		return 0, 0, fmt.Errorf("%s: %q is above card %s's %d MiB", f, mem.String(), card.UUID, card.MemoryMiB)
	case !whole || bytes%(1<<20) != 0:
		return 0, 0, fmt.Errorf("%s: %q is not a whole number of MiB", f, mem.String())
	case bytes == 0:
		return 0, 0, fmt.Errorf("%s: %q is zero (a share needs memory)", f, mem.String())
	}
	q, ok := cc[DRACapacityCores]
	if !ok {
		return 0, 0, fmt.Errorf("%s: %s missing (the scheduler lists every capacity it consumed)", field, DRACapacityCores)
	}
	f = fmt.Sprintf("%s[%s]", field, DRACapacityCores)
	n, whole := wholeValue(q)
	switch {
	case q.Sign() < 0:
		return 0, 0, fmt.Errorf("%s: %q is negative", f, q.String())
	case q.Cmp(*resource.NewQuantity(DRAMaxCores, resource.DecimalSI)) > 0:
		return 0, 0, fmt.Errorf("%s: %q is above %d percent of card %s", f, q.String(), DRAMaxCores, card.UUID)
	case !whole:
		return 0, 0, fmt.Errorf("%s: %q is not a whole percent", f, q.String())
	}
	return bytes >> 20, int(n), nil
}

// wholeValue is q as an integer, and whether q is exactly that integer. Value saturates
// on huge quantities; the callers use the result only after their bound checks.
func wholeValue(q resource.Quantity) (int64, bool) {
	n := q.Value() // rounds up
	return n, resource.NewQuantity(n, resource.DecimalSI).Cmp(q) == 0
}
