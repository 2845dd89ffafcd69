package vgpu

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
)

func TestDefaultCardResourcesAreLeftToTessera(t *testing.T) {
	have := vapi.IgnoredDevicesList.List()
	for _, n := range []string{api.ResourceMemory, api.ResourceCores, string(api.DefaultResourceNames().MemoryPercentage)} {
		if !slices.Contains(have, n) {
			t.Errorf("Volcano still counts %s (ignored: %v)", n, have)
		}
	}
	// Card slots are a node resource the kubelet admits against: Volcano keeps them.
	if slices.Contains(have, api.ResourceNumber) {
		t.Errorf("%s is on Volcano's ignored list; queues could not cap card slots", api.ResourceNumber)
	}
}

func TestPrepareVolcanoRegistersConfiguredNames(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	custom := write("custom.conf", `actions: "enqueue, allocate"
tiers:
- plugins:
  - name: vgpu
    arguments:
      vgpu.ResourceMemory: example.com/gpu-mem
      vgpu.ResourceCores: example.com/gpu-sm
`)
	if err := PrepareVolcano(custom); err != nil {
		t.Fatal(err)
	}
	have := vapi.IgnoredDevicesList.List()
	for _, n := range []string{"example.com/gpu-mem", "example.com/gpu-sm"} {
		if !slices.Contains(have, n) {
			t.Errorf("configured resource %s not registered (ignored: %v)", n, have)
		}
	}
	if err := PrepareVolcano(""); err != nil {
		t.Errorf("no conf (Volcano's built-in default) must be fine: %v", err)
	}
	if err := PrepareVolcano(write("nogpu.conf", "actions: allocate\ntiers:\n- plugins:\n  - name: gang\n")); err != nil {
		t.Errorf("a conf without the vgpu plugin must be fine: %v", err)
	}
	if err := PrepareVolcano(write("bad.conf", "tiers: [")); err == nil || !strings.Contains(err.Error(), "bad.conf") {
		t.Errorf("an unparsable conf gave %v, want an error naming the file", err)
	}
	if err := PrepareVolcano(filepath.Join(dir, "missing.conf")); err == nil || !strings.Contains(err.Error(), "missing.conf") {
		t.Errorf("a missing conf gave %v, want an error naming the file", err)
	}
}
