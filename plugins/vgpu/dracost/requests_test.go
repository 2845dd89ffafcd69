package dracost

import (
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestCardRequestsReadEachRequestPerCard(t *testing.T) {
	first := resourceapi.DeviceRequest{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "other", DeviceClassName: "gpu.example.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		{Name: "ours", DeviceClassName: Class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 3,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{CapacityCores: resource.MustParse("10")}}},
	}}
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []CardRequest
		ok    bool
	}{
		{"two shares of 8 GiB", claimOf(request(Class, 2, map[resourceapi.QualifiedName]string{CapacityMemory: "8Gi", CapacityCores: "50"})),
			[]CardRequest{{Field: "claim ns/c: spec.devices.requests[0].exactly", Count: 2, MemoryMiB: 8192, Cores: 50}}, true},
		{"no capacity reads no memory and 100 cores", claimOf(request(Class, 0, nil)),
			[]CardRequest{{Field: "claim ns/c: spec.devices.requests[0].exactly", Count: 1, MemoryMiB: 0, Cores: 100}}, true},
		{"memory rounds up to whole MiB", claimOf(request(Class, 1, map[resourceapi.QualifiedName]string{CapacityMemory: "1048577"})),
			[]CardRequest{{Field: "claim ns/c: spec.devices.requests[0].exactly", Count: 1, MemoryMiB: 2, Cores: 100}}, true},
		{"firstAvailable: the first of the class", claimOf(first),
			[]CardRequest{{Field: "claim ns/c: spec.devices.requests[0].firstAvailable[1]", Count: 3, MemoryMiB: 0, Cores: 10}}, true},
		{"another class only", claimOf(request("gpu.example.com", 1, nil)), nil, false},
		{"ours beside another class", claimOf(request("gpu.example.com", 4, nil), request(Class, 1, nil)),
			[]CardRequest{{Field: "claim ns/c: spec.devices.requests[1].exactly", Count: 1, MemoryMiB: 0, Cores: 100}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := CardRequests(tc.claim)
			if err != nil || ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CardRequests = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
	all := request(Class, 0, nil)
	all.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	if _, ok, err := CardRequests(claimOf(all)); !ok || err == nil ||
		!strings.Contains(err.Error(), `spec.devices.requests[0].exactly.allocationMode: "All"`) {
		t.Errorf("allocationMode All: ok %v, err %v; want an error naming the field", ok, err)
	}
	hot := claimOf(request(Class, 1, map[resourceapi.QualifiedName]string{CapacityCores: "101"}))
	if _, _, err := CardRequests(hot); err == nil || !strings.Contains(err.Error(), `capacity.requests[cores]: "101" is above 100`) {
		t.Errorf("cores above 100: %v", err)
	}
}

// FuzzCardRequests feeds arbitrary counts, quantities and modes through CardRequests:
// it never panics, and agrees with Asked on what the claim costs.
func FuzzCardRequests(f *testing.F) {
	f.Add(int64(1), "4096Mi", "30", "ExactCount")
	f.Add(int64(0), "", "", "")
	f.Add(int64(3), "1", "100", "ExactCount")
	f.Add(int64(-2), "-1Gi", "101", "All")
	f.Add(int64(5), "0", "0", "ExactCount")
	f.Fuzz(func(t *testing.T, count int64, memory, cores, mode string) {
		if hugeExponent(memory) || hugeExponent(cores) {
			t.Skip()
		}
		r := fuzzedRequest(count, memory, cores, mode)
		got, ok, err := CardRequests(claimOf(r))
		_, _, askedErr := Asked(claimOf(r), 81559)
		if !ok || (err == nil) != (askedErr == nil) {
			t.Fatalf("CardRequests: ok %v, err %v; Asked's err %v", ok, err, askedErr)
		}
		if err != nil {
			return
		}
		if len(got) != 1 || got[0].Count < 1 || got[0].MemoryMiB < 0 || got[0].Cores < 0 || got[0].Cores > MaxCores {
			t.Fatalf("CardRequests = %+v", got)
		}
	})
}
