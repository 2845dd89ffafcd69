package dracost

import (
	"errors"
	"math"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

var testCards = []api.Card{
	{UUID: "GPU-a", Index: 0, MemoryMiB: 40960},
	{UUID: "GPU-b", Index: 1, MemoryMiB: 81559},
	{UUID: "GPU-m", Index: 2, MemoryMiB: 40960, MIG: true},
}

func cardsOf(node string) ([]api.Card, bool) {
	if node == "n1" {
		return testCards, true
	}
	return nil, false
}

func result(pool, device, memory, cores string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: Driver, Pool: pool, Device: device}
	if memory != "" || cores != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
		if memory != "" {
			r.ConsumedCapacity[CapacityMemory] = resource.MustParse(memory)
		}
		if cores != "" {
			r.ConsumedCapacity[CapacityCores] = resource.MustParse(cores)
		}
	}
	return r
}

func allocated(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results}}},
	}
}

func TestHeldCountsSharesAndWholeCards(t *testing.T) {
	other := result("n1", "card-0", "", "")
	other.Driver = "gpu.example.com"
	shares, skips := Held(allocated(result("n1", "card-0", "4Gi", "30"), result("n1", "card-1", "", ""), other), cardsOf)
	if len(skips) != 0 {
		t.Fatalf("skipped %v", skips)
	}
	want := []Share{{Node: "n1", UUID: "GPU-a", Index: 0, MemoryMiB: 4096, Cores: 30}, {Node: "n1", UUID: "GPU-b", Index: 1, MemoryMiB: 81559, Cores: 100}}
	if len(shares) != 2 || shares[0] != want[0] || shares[1] != want[1] {
		t.Fatalf("shares %+v, want %+v (another driver's result ignored)", shares, want)
	}
	if got := Sum(shares); got != (fairshare.Amount{MemoryMiB: 4096 + 81559, Cores: 130}) {
		t.Errorf("Sum = %v", got)
	}
	if s, k := Held(&resourceapi.ResourceClaim{}, cardsOf); s != nil || k != nil {
		t.Errorf("an unallocated claim holds %v, skips %v", s, k)
	}
}

func TestHeldSkipsHostileResultsWithTheirReason(t *testing.T) {
	admin := result("n1", "card-0", "", "")
	admin.AdminAccess = ptr.To(true)
	odd := result("n1", "card-0", "1Gi", "10")
	odd.ConsumedCapacity["bandwidth"] = resource.MustParse("1")
	for _, tc := range []struct {
		name   string
		r      resourceapi.DeviceRequestAllocationResult
		reason string
		says   string
	}{
		{"another node", result("n9", "card-0", "", ""), ReasonUnknownNode, `pool: "n9"`},
		{"card not published", result("n1", "card-7", "", ""), ReasonUnknownDevice, `device: "card-7"`},
		{"not the agent's spelling", result("n1", "card-01", "", ""), ReasonUnknownDevice, `"card-01"`},
		{"MIG card", result("n1", "card-2", "", ""), ReasonUnknownDevice, `"card-2"`},
		{"admin access", admin, ReasonAdminAccess, "adminAccess: true"},
		{"negative memory", result("n1", "card-0", "-1Mi", "10"), ReasonBadCapacity, `"-1Mi" is negative`},
		{"memory above the card", result("n1", "card-0", "41Gi", "10"), ReasonBadCapacity, `"41Gi" is above card GPU-a's 40960 MiB`},
		{"part of a MiB", result("n1", "card-0", "1.5Mi", "10"), ReasonBadCapacity, "not a whole number of MiB"},
		{"zero memory", result("n1", "card-0", "0", "10"), ReasonBadCapacity, "is zero"},
		{"cores missing", result("n1", "card-0", "1Gi", ""), ReasonBadCapacity, "cores missing"},
		{"memory missing", result("n1", "card-0", "", "10"), ReasonBadCapacity, "memory missing"},
		{"cores above 100", result("n1", "card-0", "1Gi", "101"), ReasonBadCapacity, `"101" is above 100`},
		{"part of a percent", result("n1", "card-0", "1Gi", "1500m"), ReasonBadCapacity, "not a whole percent"},
		{"negative cores", result("n1", "card-0", "1Gi", "-5"), ReasonBadCapacity, `"-5" is negative`},
		{"unknown capacity", odd, ReasonBadCapacity, `"bandwidth" is not a capacity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shares, skips := Held(allocated(tc.r), cardsOf)
			if len(shares) != 0 || len(skips) != 1 {
				t.Fatalf("shares %v, skips %v; want one skip", shares, skips)
			}
			s := skips[0]
			if s.Reason != tc.reason || !errors.Is(s.Err, ErrNotCounted) || !strings.Contains(s.Err.Error(), tc.says) ||
				!strings.Contains(s.Err.Error(), "claim ns/c: status.allocation.devices.results[0]") {
				t.Errorf("skip %q (%s), want reason %q naming the field and %q", s.Err, s.Reason, tc.reason, tc.says)
			}
		})
	}
	shares, skips := Held(allocated(result("n1", "card-0", "1Gi", "10"), result("n1", "card-0", "1Gi", "10")), cardsOf)
	if len(shares) != 1 || len(skips) != 1 || skips[0].Reason != ReasonCardTwice {
		t.Errorf("one card twice: shares %v, skips %v; want the first counted and the second skipped", shares, skips)
	}
}

func request(class string, count int64, capacity map[resourceapi.QualifiedName]string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	if capacity != nil {
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for k, v := range capacity {
			r.Exactly.Capacity.Requests[k] = resource.MustParse(v)
		}
	}
	return r
}

func claimOf(reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
}

func TestAskedCostsCapacityTimesCount(t *testing.T) {
	first := resourceapi.DeviceRequest{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "other", DeviceClassName: "gpu.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		{Name: "ours", DeviceClassName: Class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{CapacityCores: resource.MustParse("10")}}},
	}}
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  fairshare.Amount
		ok    bool
	}{
		{"share of a card", claimOf(request(Class, 1, map[resourceapi.QualifiedName]string{CapacityMemory: "4096Mi", CapacityCores: "30"})),
			fairshare.Amount{MemoryMiB: 4096, Cores: 30}, true},
		{"two cards", claimOf(request(Class, 2, map[resourceapi.QualifiedName]string{CapacityMemory: "8Gi", CapacityCores: "50"})),
			fairshare.Amount{MemoryMiB: 16384, Cores: 100}, true},
		{"no capacity is a whole card", claimOf(request(Class, 0, nil)), fairshare.Amount{MemoryMiB: 81559, Cores: 100}, true},
		{"memory only keeps 100 cores", claimOf(request(Class, 1, map[resourceapi.QualifiedName]string{CapacityMemory: "1000001"})),
			fairshare.Amount{MemoryMiB: 1, Cores: 100}, true},
		{"another class", claimOf(request("gpu.example.com", 1, nil)), fairshare.Amount{}, false},
		{"firstAvailable: ours", claimOf(first), fairshare.Amount{MemoryMiB: 81559, Cores: 10}, true},
		{"ours and another", claimOf(request(Class, 1, nil), request("gpu.example.com", 4, nil)), fairshare.Amount{MemoryMiB: 81559, Cores: 100}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Asked(tc.claim, 81559)
			if err != nil || ok != tc.ok || got != tc.want {
				t.Errorf("Asked = %v, %v, %v; want %v, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
	all := request(Class, 0, nil)
	all.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	if _, ok, err := Asked(claimOf(all), 81559); !ok || err == nil || !strings.Contains(err.Error(), `spec.devices.requests[0].exactly.allocationMode: "All"`) {
		t.Errorf("allocationMode All: ok %v, err %v; want an error naming the field", ok, err)
	}
	neg := claimOf(request(Class, 1, map[resourceapi.QualifiedName]string{CapacityCores: "-1"}))
	if _, _, err := Asked(neg, 81559); err == nil || !strings.Contains(err.Error(), `capacity.requests[cores]: "-1" is negative`) {
		t.Errorf("negative cores: %v", err)
	}
}

// FuzzHeld feeds arbitrary device names and quantities through Held: it never panics,
// and what it counts stays within the card.
func FuzzHeld(f *testing.F) {
	f.Add("n1", "card-0", "4Gi", "30")
	f.Add("n1", "card-1", "", "")
	f.Add("n1", "card-00", "1Mi", "0")
	f.Add("n9", "card-0", "1e3", "100")
	f.Add("n1", "card-0", "1.5Mi", "99.5")
	f.Add("n1", "card--1", "-1", "-1")
	f.Add("n1", "card-1", "81559Mi", "100")
	f.Add("n1", "card-1", "9223372036854775807", "1e20")
	f.Fuzz(func(t *testing.T, pool, device, memory, cores string) {
		if hugeExponent(memory) || hugeExponent(cores) {
			// The quantity parser itself takes unbounded time on these (10^6854775807);
			// a claim carrying one never decodes, so it never reaches Held.
			t.Skip()
		}
		r := resourceapi.DeviceRequestAllocationResult{Driver: Driver, Pool: pool, Device: device}
		cc := map[resourceapi.QualifiedName]resource.Quantity{}
		if q, err := resource.ParseQuantity(memory); err == nil {
			cc[CapacityMemory] = q
		}
		if q, err := resource.ParseQuantity(cores); err == nil {
			cc[CapacityCores] = q
		}
		if len(cc) > 0 {
			r.ConsumedCapacity = cc
		}
		shares, skips := Held(allocated(r), cardsOf)
		if len(shares)+len(skips) != 1 {
			t.Fatalf("one result gave %d shares and %d skips", len(shares), len(skips))
		}
		for _, s := range shares {
			var card api.Card
			for _, c := range testCards {
				if c.UUID == s.UUID {
					card = c
				}
			}
			if card.MIG || s.MemoryMiB <= 0 || s.MemoryMiB > card.MemoryMiB || s.Cores < 0 || s.Cores > MaxCores {
				t.Fatalf("share %+v outside card %+v", s, card)
			}
		}
		for _, s := range skips {
			if !errors.Is(s.Err, ErrNotCounted) || s.Reason == "" {
				t.Fatalf("skip %+v lacks its reason", s)
			}
		}
	})
}

// hugeExponent reports a quantity with an exponent of more than three digits.
func hugeExponent(s string) bool {
	i := strings.IndexAny(s, "eE")
	return i >= 0 && len(s)-i-1 > 3
}

// fuzzedRequest is a request of Tessera's class with the fuzzer's count and mode, and
// the memory and cores it wrote where they parse as quantities.
func fuzzedRequest(count int64, memory, cores, mode string) resourceapi.DeviceRequest {
	r := request(Class, count, nil)
	r.Exactly.AllocationMode = resourceapi.DeviceAllocationMode(mode)
	reqs := map[resourceapi.QualifiedName]resource.Quantity{}
	if q, err := resource.ParseQuantity(memory); err == nil {
		reqs[CapacityMemory] = q
	}
	if q, err := resource.ParseQuantity(cores); err == nil {
		reqs[CapacityCores] = q
	}
	if len(reqs) > 0 {
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: reqs}
	}
	return r
}

// FuzzAsked feeds arbitrary counts and capacity requests through Asked: it never
// panics, and a cost it returns is never negative.
func FuzzAsked(f *testing.F) {
	f.Add(int64(1), "4096Mi", "30", "ExactCount")
	f.Add(int64(0), "", "", "")
	f.Add(int64(3), "1", "100", "ExactCount")
	f.Add(int64(-2), "-1Gi", "101", "All")
	f.Add(int64(9223372036854775807), "9Ei", "0.5", "ExactCount")
	f.Fuzz(func(t *testing.T, count int64, memory, cores, mode string) {
		if hugeExponent(memory) || hugeExponent(cores) {
			t.Skip()
		}
		r := fuzzedRequest(count, memory, cores, mode)
		cost, ok, err := Asked(claimOf(r), 81559)
		if !ok {
			t.Fatalf("a request of class %s was not recognised", Class)
		}
		if err == nil && (cost.MemoryMiB < 0 || cost.Cores < 0 || cost.Cores > MaxCores*math.Max(1, float64(count))) {
			t.Fatalf("cost %v for count %d, memory %q, cores %q", cost, count, memory, cores)
		}
	})
}
