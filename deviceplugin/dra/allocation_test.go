package dra

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tessera-gpu/tessera/api"
)

var testCards = []api.Card{
	{UUID: "GPU-aaaa", Index: 0, Model: "NVIDIA A30", MemoryMiB: 24576, NUMA: 0, Healthy: true},
	{UUID: "GPU-bbbb", Index: 1, Model: "NVIDIA A30", MemoryMiB: 24576, NUMA: 0, Healthy: true},
	{UUID: "GPU-cccc", Index: 2, Model: "NVIDIA A100", MemoryMiB: 40960, NUMA: 1, Healthy: true, MIG: true},
}

func result(device string, consumed map[resourceapi.QualifiedName]resource.Quantity) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: DriverName, Pool: "node-a", Device: device,
		ConsumedCapacity: consumed}
}

func consumedOf(mem, cores string) map[resourceapi.QualifiedName]resource.Quantity {
	m := map[resourceapi.QualifiedName]resource.Quantity{}
	if mem != "" {
		m[CapacityMemory] = resource.MustParse(mem)
	}
	if cores != "" {
		m[CapacityCores] = resource.MustParse(cores)
	}
	return m
}

func claimWith(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train-0-gpu", UID: types.UID("3f0c1e9a-0000-4000-8000-000000000001")},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results}}},
	}
}

func TestClaimSharesAccepts(t *testing.T) {
	other := result("gpu-0", nil)
	other.Driver = "gpu.nvidia.com"
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []Share
	}{
		{"a share of 4096 MiB and 30 cores is read as written",
			claimWith(result("card-1", consumedOf("4096Mi", "30"))),
			[]Share{{Request: "gpu", Pool: "node-a", Device: "card-1", UUID: "GPU-bbbb", Index: 1, MemoryMiB: 4096, Cores: 30}}},
		{"a result without consumed capacity is the whole card",
			claimWith(result("card-0", nil)),
			[]Share{{Request: "gpu", Pool: "node-a", Device: "card-0", UUID: "GPU-aaaa", Index: 0, MemoryMiB: 24576, Cores: 100}}},
		{"memory in other units is converted when it is whole MiB, and zero cores is allowed",
			claimWith(result("card-0", consumedOf("1.5Gi", "0"))),
			[]Share{{Request: "gpu", Pool: "node-a", Device: "card-0", UUID: "GPU-aaaa", Index: 0, MemoryMiB: 1536, Cores: 0}}},
		{"results for another driver are skipped and ours come back in card order",
			claimWith(result("card-1", consumedOf("1Gi", "10")), other, result("card-0", consumedOf("2Gi", "20"))),
			[]Share{{Request: "gpu", Pool: "node-a", Device: "card-0", UUID: "GPU-aaaa", Index: 0, MemoryMiB: 2048, Cores: 20},
				{Request: "gpu", Pool: "node-a", Device: "card-1", UUID: "GPU-bbbb", Index: 1, MemoryMiB: 1024, Cores: 10}}},
		{"a claim only for another driver has no share here", claimWith(other), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ClaimShares(tt.claim, "node-a", testCards)
			if err != nil {
				t.Fatalf("ClaimShares: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("shares\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

type hostileClaim struct {
	name  string
	claim *resourceapi.ResourceClaim
	want  []string
}

// pureOnly are the hostile cases the gRPC test skips: they need testCards (a MIG card),
// or the kubelet plugin helper refuses them before the driver sees them (an unallocated
// claim).
var pureOnly = map[string]bool{"a card in MIG mode, which is not published": true, "a claim that is not allocated": true}

// hostileClaims are allocations the agent must refuse, with the field and value each
// error must name. The gRPC test sends the same claims through the kubelet's API.
func hostileClaims() []hostileClaim {
	wrongPool := result("card-0", nil)
	wrongPool.Pool = "node-b"
	admin := result("card-0", nil)
	admin.AdminAccess = ptr.To(true)
	unallocated := claimWith()
	unallocated.Status.Allocation = nil
	return []hostileClaim{
		{"a device this node does not publish", claimWith(result("gpu-0", nil)), []string{"results[0].device", `"gpu-0"`}},
		{"a device name with a padded index", claimWith(result("card-01", nil)), []string{"results[0].device", `"card-01"`}},
		{"a card in MIG mode, which is not published", claimWith(result("card-2", nil)), []string{"results[0].device", `"card-2"`}},
		{"another node's pool", claimWith(wrongPool), []string{"results[0].pool", `"node-b"`}},
		{"memory above the card", claimWith(result("card-0", consumedOf("24577Mi", "10"))),
			[]string{"consumedCapacity[memory]", `"24577Mi"`, "24576 MiB"}},
		{"negative memory", claimWith(result("card-0", consumedOf("-1Gi", "10"))), []string{"consumedCapacity[memory]", `"-1Gi"`, "negative"}},
		{"memory that is not whole MiB", claimWith(result("card-0", consumedOf("1500Ki", "10"))),
			[]string{"consumedCapacity[memory]", `"1500Ki"`, "whole number of MiB"}},
		{"memory in milli-bytes", claimWith(result("card-0", consumedOf("1048576500m", "10"))),
			[]string{"consumedCapacity[memory]", "whole number of MiB"}},
		{"zero memory, which vgpu-core would read as unlimited", claimWith(result("card-0", consumedOf("0", "10"))),
			[]string{"consumedCapacity[memory]", `"0"`, "zero"}},
		{"cores above 100", claimWith(result("card-0", consumedOf("1Gi", "101"))), []string{"consumedCapacity[cores]", `"101"`, "above 100"}},
		{"negative cores", claimWith(result("card-0", consumedOf("1Gi", "-5"))), []string{"consumedCapacity[cores]", `"-5"`, "negative"}},
		{"fractional cores", claimWith(result("card-0", consumedOf("1Gi", "500m"))), []string{"consumedCapacity[cores]", `"500m"`, "whole percent"}},
		{"consumed capacity without memory", claimWith(result("card-0", consumedOf("", "10"))), []string{"consumedCapacity", "memory missing"}},
		{"consumed capacity without cores", claimWith(result("card-0", consumedOf("1Gi", ""))), []string{"consumedCapacity", "cores missing"}},
		{"a capacity this driver does not publish", claimWith(result("card-0", map[resourceapi.QualifiedName]resource.Quantity{
			CapacityMemory: resource.MustParse("1Gi"), CapacityCores: resource.MustParse("1"), "bandwidth": resource.MustParse("1")})),
			[]string{"consumedCapacity", `"bandwidth"`}},
		{"the same card twice in one claim", claimWith(result("card-0", consumedOf("1Gi", "10")), result("card-0", consumedOf("1Gi", "10"))),
			[]string{"results[1].device", "also results[0]"}},
		{"admin access", claimWith(admin), []string{"results[0].adminAccess"}},
		{"a claim that is not allocated", unallocated, []string{"status.allocation: missing"}},
	}
}

func TestClaimSharesRefusesHostileAllocations(t *testing.T) {
	for _, tt := range hostileClaims() {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ClaimShares(tt.claim, "node-a", testCards)
			if !errors.Is(err, ErrInvalidClaim) {
				t.Fatalf("err = %v, want ErrInvalidClaim", err)
			}
			for _, w := range append(tt.want, "claim team-a/train-0-gpu") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
