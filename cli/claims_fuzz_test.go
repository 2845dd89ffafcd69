package cli

import (
	"encoding/json"
	"strconv"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
)

// readClaim takes a ResourceClaim's status as any scheduler wrote it: it never panics,
// and every share it books is one the node agent would take: a whole card, or a
// positive whole number of MiB and 0 to 100 cores; a device it cannot name a card of
// is a problem, never a share.
func FuzzReadClaim(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"namespace":"a","name":"c"},"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"vgpu.tessera.io"}}]}}}`,
		`{"status":{"allocation":{"devices":{"results":[{"request":"gpu","driver":"vgpu.tessera.io","pool":"n","device":"card-0",` +
			`"consumedCapacity":{"memory":"4Gi","cores":"30"}}]}},"reservedFor":[{"resource":"pods","name":"p","uid":"u"}]}}`,
		`{"status":{"allocation":{"devices":{"results":[{"driver":"vgpu.tessera.io","pool":"n","device":"card-1"}]}}}}`,
		`{"status":{"allocation":{"devices":{"results":[{"driver":"vgpu.tessera.io","device":"card-01","consumedCapacity":{"memory":"1.5Mi","cores":"101"}}]}}}}`,
		`{"status":{"allocation":{"devices":{"results":[{"driver":"vgpu.tessera.io","device":"x","consumedCapacity":{"memory":"-1","cores":"0.5","bogus":"1"}}]}}}}`,
		`{"status":{"allocation":{"devices":{"results":[{"driver":"other","device":"card-0"}]}}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c resourcev1.ResourceClaim
		if json.Unmarshal(data, &c) != nil {
			return
		}
		v, ok := readClaim(&c)
		if !ok && (v.Allocated || len(v.Shares) > 0) {
			t.Fatalf("a claim with Tessera shares is not Tessera's: %+v", v)
		}
		for _, s := range v.Shares {
			switch {
			case s.Cores < 0 || s.Cores > 100:
				t.Fatalf("share with %d cores: %+v", s.Cores, s)
			case !s.Whole && s.MemoryMiB <= 0:
				t.Fatalf("share with %d MiB: %+v", s.MemoryMiB, s)
			case s.Whole && (s.Cores != 100 || s.MemoryMiB != 0):
				t.Fatalf("whole card read as a share: %+v", s)
			case s.Device != "card-"+strconv.Itoa(s.Index):
				t.Fatalf("device %q read as card %d", s.Device, s.Index)
			}
		}
	})
}
