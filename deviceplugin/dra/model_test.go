package dra

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func discover(t *testing.T, lib nvml.Interface) *api.NodeInventory {
	t.Helper()
	res, err := discovery.Discover(lib, discovery.Options{Shares: 4})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return &api.NodeInventory{Version: api.InventoryVersion, Cards: res.Cards(), Links: res.Links}
}

func str(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	}
	return "<unset>"
}

func TestDevicesFromDiscoveredMachines(t *testing.T) {
	tests := []struct {
		name    string
		lib     nvml.Interface
		devices []string
		domain  []string
		numa    []string
		model   string
		product string
		memory  string
	}{
		{
			name:    "two NVLink pairs on two NUMA nodes give two link domains",
			lib:     nvmlfake.FourCardsTwoNUMA(),
			devices: []string{"card-0", "card-1", "card-2", "card-3"},
			domain:  []string{"nvlink-0", "nvlink-0", "nvlink-2", "nvlink-2"},
			numa:    []string{"0", "0", "1", "1"},
			model:   "A30", product: "NVIDIA A30", memory: "24Gi",
		},
		{
			name:    "the DGX A100's NVSwitch puts all eight cards in one link domain",
			lib:     nvmlfake.DGXA100(),
			devices: []string{"card-0", "card-1", "card-2", "card-3", "card-4", "card-5", "card-6", "card-7"},
			domain:  []string{"nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0", "nvlink-0"},
			numa:    []string{"0", "0", "0", "0", "1", "1", "1", "1"},
			model:   "Mock NVIDIA A100-SXM4-40GB", product: "Mock NVIDIA A100-SXM4-40GB", memory: "40Gi",
		},
		{
			name:    "cards joined by PCIe only are each alone in their domain",
			lib:     nvmlfake.NewMachine([]nvmlfake.CardSpec{{Name: "Tesla T4", MemoryMiB: 15360, SMs: 40}, {Name: "Tesla T4", MemoryMiB: 15360, SMs: 40, NUMA: 1}}),
			devices: []string{"card-0", "card-1"},
			domain:  []string{"single-0", "single-1"},
			numa:    []string{"0", "1"},
			model:   "Tesla T4", product: "Tesla T4", memory: "15Gi",
		},
		{
			name: "a card in MIG mode is not published and keeps its neighbours' names",
			lib: nvmlfake.NewMachine([]nvmlfake.CardSpec{{Name: "NVIDIA A100", MemoryMiB: 40960, MIG: true},
				{Name: "NVIDIA A100", MemoryMiB: 40960}}),
			devices: []string{"card-1"},
			domain:  []string{"single-1"},
			numa:    []string{"0"},
			model:   "A100", product: "NVIDIA A100", memory: "40Gi",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := discover(t, tt.lib)
			devs := Devices(inv, nil, Options{Pool: "node-a"})
			var names []string
			for _, d := range devs {
				names = append(names, d.Name)
			}
			if !reflect.DeepEqual(names, tt.devices) {
				t.Fatalf("devices %v, want %v", names, tt.devices)
			}
			for i, d := range devs {
				a := d.Attributes
				if got := str(a[AttrLinkDomain]); got != tt.domain[i] {
					t.Errorf("%s linkDomain %q, want %q", d.Name, got, tt.domain[i])
				}
				if got := str(a[AttrNUMANode]); got != tt.numa[i] {
					t.Errorf("%s numaNode %q, want %q", d.Name, got, tt.numa[i])
				}
				if str(a[AttrModel]) != tt.model || str(a[AttrProductName]) != tt.product {
					t.Errorf("%s model %q product %q, want %q and %q", d.Name, str(a[AttrModel]), str(a[AttrProductName]), tt.model, tt.product)
				}
				if !strings.HasPrefix(str(a[AttrUUID]), "GPU-") || str(a[AttrIndex]) != strings.TrimPrefix(d.Name, "card-") {
					t.Errorf("%s uuid %q index %q", d.Name, str(a[AttrUUID]), str(a[AttrIndex]))
				}
				if mem := d.Capacity[CapacityMemory].Value; mem.String() != tt.memory {
					t.Errorf("%s memory %s, want %s", d.Name, mem.String(), tt.memory)
				}
				if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
					t.Errorf("%s does not allow multiple allocations", d.Name)
				}
				if len(d.Taints) != 0 {
					t.Errorf("%s has taints %v on a healthy, uncordoned node", d.Name, d.Taints)
				}
			}
		})
	}
}

func TestCapacityPolicies(t *testing.T) {
	tests := []struct {
		name                      string
		cardMiB, minMiB           int64
		wantMin, wantMax, wantDef string
		wantStep                  string
	}{
		{"an H100's odd size is claimable whole, in steps of 1 MiB from 256 MiB", 81559, 0, "256Mi", "81559Mi", "81559Mi", "1Mi"},
		{"a configured minimum replaces 256 MiB", 24576, 1024, "1Gi", "24Gi", "24Gi", "1Mi"},
		{"a card no larger than the minimum is offered whole only", 200, 0, "200Mi", "200Mi", "200Mi", ""},
		{"a card one MiB above the minimum keeps the step", 257, 0, "256Mi", "257Mi", "257Mi", "1Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := MemoryCapacity(tt.cardMiB, tt.minMiB)
			r := c.RequestPolicy.ValidRange
			step := ""
			if r.Step != nil {
				step = r.Step.String()
			}
			if r.Min.String() != tt.wantMin || r.Max.String() != tt.wantMax || c.RequestPolicy.Default.String() != tt.wantDef || step != tt.wantStep {
				t.Errorf("min %s max %s default %s step %q, want %s %s %s %q", r.Min, r.Max, c.RequestPolicy.Default, step,
					tt.wantMin, tt.wantMax, tt.wantDef, tt.wantStep)
			}
			// The API server's rules: min+step <= value, (default-min) and (max-min)
			// multiples of step.
			if r.Step != nil {
				v, mn, st := c.Value.Value(), r.Min.Value(), r.Step.Value()
				if mn+st > v || (r.Max.Value()-mn)%st != 0 || (c.RequestPolicy.Default.Value()-mn)%st != 0 {
					t.Errorf("policy breaks the API's step rules: value %d min %d step %d", v, mn, st)
				}
			}
		})
	}
	cores := CoresCapacity()
	r := cores.RequestPolicy.ValidRange
	if cores.Value.String() != "100" || r.Min.String() != "0" || r.Max.String() != "100" || r.Step.String() != "1" ||
		cores.RequestPolicy.Default.String() != "100" {
		t.Errorf("cores capacity %s min %s max %s step %s default %s, want 100 0 100 1 100", cores.Value.String(), r.Min, r.Max, r.Step,
			cores.RequestPolicy.Default)
	}
}

func TestTaints(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		healthy bool
		reason  string
		cordon  *api.CardCordon
		want    []resourceapi.DeviceTaint
	}{
		{name: "a healthy card that nobody cordoned has no taint", healthy: true},
		{name: "a fatal XID taints the card with the reason as a label value", healthy: false, reason: "fatal XID 79",
			want: []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: "fatal-XID-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
		{name: "an unhealthy card without a reason still gets the taint", healthy: false,
			want: []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: "unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
		{name: "a cordon taints the card under its own key", healthy: true, cordon: &api.CardCordon{Reason: "fan noise; RMA #42", Since: since},
			want: []resourceapi.DeviceTaint{{Key: TaintCordoned, Value: "fan-noise-RMA-42", Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
		{name: "an unhealthy cordoned card carries both taints, unhealthy first", healthy: false, reason: "double-bit ECC error",
			cordon: &api.CardCordon{Since: since},
			want: []resourceapi.DeviceTaint{
				{Key: TaintUnhealthy, Value: "double-bit-ECC-error", Effect: resourceapi.DeviceTaintEffectNoSchedule},
				{Key: TaintCordoned, Value: "", Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Taints(api.Card{UUID: "GPU-1", Healthy: tt.healthy, Cordon: tt.cordon}, tt.reason)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("taints %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTaintsFollowHealthAndCordonsThroughResources(t *testing.T) {
	inv := discover(t, nvmlfake.FourCardsTwoNUMA())
	inv.Cards[1].Healthy = false
	reasons := map[string]string{inv.Cards[1].UUID: "fatal XID 48"}
	cordons := &api.NodeCordons{Version: api.CordonsVersion, Cards: map[string]api.CardCordon{
		inv.Cards[2].UUID: {Reason: "maintenance", Since: time.Now()}}}
	res := Resources(inv.WithCordons(cordons), reasons, Options{Pool: "node-a"})
	pool, ok := res.Pools["node-a"]
	if !ok || len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 4 {
		t.Fatalf("resources %+v, want one pool node-a with one slice of 4 devices", res)
	}
	keys := func(d resourceapi.Device) string {
		var s []string
		for _, tn := range d.Taints {
			s = append(s, tn.Key+"="+tn.Value)
		}
		return strings.Join(s, ",")
	}
	want := []string{"", TaintUnhealthy + "=fatal-XID-48", TaintCordoned + "=maintenance", ""}
	for i, d := range pool.Slices[0].Devices {
		if got := keys(d); got != want[i] {
			t.Errorf("%s taints %q, want %q", d.Name, got, want[i])
		}
	}
	// The card heals and the cordon is lifted: the same call publishes no taint.
	inv.Cards[1].Healthy = true
	for _, d := range Resources(inv, nil, Options{Pool: "node-a"}).Pools["node-a"].Slices[0].Devices {
		if len(d.Taints) != 0 {
			t.Errorf("%s still tainted after healing: %v", d.Name, d.Taints)
		}
	}
}

func TestResourcesSplitsLargePools(t *testing.T) {
	inv := &api.NodeInventory{}
	for i := 0; i < resourceapi.ResourceSliceMaxDevices+3; i++ {
		inv.Cards = append(inv.Cards, api.Card{UUID: "GPU-" + strconv.Itoa(i), Index: i, Model: "T4", MemoryMiB: 15360, NUMA: -1, Healthy: true})
	}
	slices := Resources(inv, nil, Options{Pool: "n"}).Pools["n"].Slices
	if len(slices) != 2 || len(slices[0].Devices) != resourceapi.ResourceSliceMaxDevices || len(slices[1].Devices) != 3 {
		t.Fatalf("got %d slices, want %d + 3 devices", len(slices), resourceapi.ResourceSliceMaxDevices)
	}
	if _, ok := slices[0].Devices[0].Attributes[AttrNUMANode]; ok {
		t.Errorf("a card with unknown NUMA node publishes numaNode")
	}
	if empty := Resources(&api.NodeInventory{}, nil, Options{Pool: "n"}).Pools["n"].Slices; len(empty) != 1 || len(empty[0].Devices) != 0 {
		t.Errorf("a node without cards publishes %d slices, want one empty slice", len(empty))
	}
}

func TestLabelValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"fatal XID 79", "fatal-XID-79"},
		{"NVML query failed: ERROR_GPU_IS_LOST", "NVML-query-failed-ERROR_GPU_IS_LOST"},
		{"  --leading and trailing--  ", "leading-and-trailing"},
		{"émoji 🔥 ok", "moji-ok"},
		{"!!!", ""},
		{strings.Repeat("a", 100), strings.Repeat("a", 63)},
		{strings.Repeat("ab ", 40), "ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab-ab"},
	}
	for _, tt := range tests {
		got := LabelValue(tt.in)
		if got != tt.want {
			t.Errorf("LabelValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(got) > 63 {
			t.Errorf("LabelValue(%q) is %d bytes", tt.in, len(got))
		}
	}
}

func TestClipKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 40) // 80 bytes
	got := clip(s)
	if len(got) > resourceapi.DeviceAttributeMaxValueLength || !strings.HasPrefix(s, got) || len(got) != 64 {
		t.Errorf("clip gave %d bytes %q", len(got), got)
	}
}
