package dracost

import (
	resourceapi "k8s.io/api/resource/v1"
)

// CardRequest is one request of Tessera's class in a claim's spec, per card: what the
// enqueue check compares with the cards of the DRA nodes before the claim is
// allocated.
type CardRequest struct {
	// Field is the request's path in the claim, for messages:
	// "claim ns/name: spec.devices.requests[0].exactly".
	Field string
	// Count is how many cards the request asks for (at least 1).
	Count int64
	// MemoryMiB is the memory it asks of each card, rounded up to whole MiB; 0 when it
	// names none (the driver's default, the whole card).
	MemoryMiB int64
	// Cores is the percent of each card's SMs it asks for (100 when it names none).
	Cores int64
}

// CardRequests lists a claim's requests of Tessera's class, as Asked reads them (of a
// request with firstAvailable alternatives, the first of the class). ok is false when
// no request names the class. A request whose cards cannot be known before allocation
// (allocationMode All, a bad quantity) is an error naming the field and the value.
func CardRequests(claim *resourceapi.ResourceClaim) (reqs []CardRequest, ok bool, err error) {
	ok, err = eachRequest(claim, func(exact *resourceapi.ExactDeviceRequest, field string) error {
		// One card's cost, with no whole-card size: a request that names no memory
		// reads 0, which the caller prices at the card it compares with.
		one := *exact
		one.Count = 1
		c, err := exactCost(&one, 0, field)
		if err != nil {
			return err
		}
		count := int64(1)
		if exact.Count > 0 {
			count = exact.Count
		}
		reqs = append(reqs, CardRequest{Field: field, Count: count, MemoryMiB: int64(c.MemoryMiB), Cores: int64(c.Cores)})
		return nil
	})
	if err != nil {
		return nil, true, err
	}
	return reqs, ok, nil
}
