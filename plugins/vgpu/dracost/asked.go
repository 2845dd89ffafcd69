package dracost

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Asked is what a claim's spec asks of Tessera's cards before it is allocated: for
// every request of DeviceClass Class, count × (memory, cores) of its capacity
// requests. A request that names no memory is costed at wholeMiB (the driver's
// default is the whole card) and one that names no cores at 100. Of a request with
// firstAvailable alternatives, the first of Tessera's class counts (the allocator
// tries them in order). ok is false when no request names Tessera's class. A request
// whose cost cannot be known (allocationMode All, a bad quantity) is an error naming
// the field and the value.
func Asked(claim *resourceapi.ResourceClaim, wholeMiB int64) (cost fairshare.Amount, ok bool, err error) {
	ok, err = eachRequest(claim, func(r *resourceapi.ExactDeviceRequest, field string) error {
		c, err := exactCost(r, wholeMiB, field)
		cost = cost.Add(c)
		return err
	})
	if err != nil {
		return fairshare.Amount{}, ok, err
	}
	return cost, ok, nil
}

// eachRequest calls fn with each request of DeviceClass Class in the claim's spec and its
// field as the claim spells it: the request itself, or of one with firstAvailable
// alternatives the first of the class (the allocator tries them in order). ok is false
// when no request names the class; the first error of fn ends the walk.
func eachRequest(claim *resourceapi.ResourceClaim, fn func(r *resourceapi.ExactDeviceRequest, field string) error) (ok bool, err error) {
	where := fmt.Sprintf("claim %s/%s", claim.Namespace, claim.Name)
	for i, r := range claim.Spec.Devices.Requests {
		field := fmt.Sprintf("%s: spec.devices.requests[%d]", where, i)
		var exact *resourceapi.ExactDeviceRequest
		switch {
		case r.Exactly != nil && r.Exactly.DeviceClassName == Class:
			exact, field = r.Exactly, field+".exactly"
		case r.Exactly == nil:
			for j := range r.FirstAvailable {
				if sub := &r.FirstAvailable[j]; sub.DeviceClassName == Class {
					exact = &resourceapi.ExactDeviceRequest{DeviceClassName: sub.DeviceClassName, AllocationMode: sub.AllocationMode,
						Count: sub.Count, Capacity: sub.Capacity}
					field = fmt.Sprintf("%s.firstAvailable[%d]", field, j)
					break
				}
			}
		}
		if exact == nil {
			continue
		}
		ok = true
		if err := fn(exact, field); err != nil {
			return true, err
		}
	}
	return ok, nil
}

// exactCost is one request's count × (memory, cores).
func exactCost(r *resourceapi.ExactDeviceRequest, wholeMiB int64, field string) (fairshare.Amount, error) {
	count := int64(1)
	switch r.AllocationMode {
	case resourceapi.DeviceAllocationModeExactCount, "":
		if r.Count > 0 {
			count = r.Count
		}
	default:
		return fairshare.Amount{}, fmt.Errorf("%s.allocationMode: %q asks for every matching card of a node; its cost is not known before allocation",
			field, r.AllocationMode)
	}
	one := fairshare.Amount{MemoryMiB: float64(wholeMiB), Cores: MaxCores}
	if r.Capacity != nil {
		for name, q := range r.Capacity.Requests {
			f := fmt.Sprintf("%s.capacity.requests[%s]", field, name)
			if q.Sign() < 0 {
				return fairshare.Amount{}, fmt.Errorf("%s: %q is negative", f, q.String())
			}
			switch name {
			case CapacityMemory:
				one.MemoryMiB = float64(ceilMiB(q))
			case CapacityCores:
				if q.Cmp(*resource.NewQuantity(MaxCores, resource.DecimalSI)) > 0 {
					return fairshare.Amount{}, fmt.Errorf("%s: %q is above %d percent of a card", f, q.String(), MaxCores)
				}
				one.Cores = float64(q.Value())
			}
		}
	}
	return fairshare.Amount{MemoryMiB: one.MemoryMiB * float64(count), Cores: one.Cores * float64(count)}, nil
}

// ceilMiB is q (bytes) in MiB, rounded up: the allocator rounds a request up to the
// capacity's next step, and the driver's step is 1 MiB.
func ceilMiB(q resource.Quantity) int64 {
	b := q.Value()
	mib := b >> 20
	if b&(1<<20-1) != 0 {
		mib++
	}
	return mib
}
