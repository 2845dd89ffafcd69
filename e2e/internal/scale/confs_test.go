package scale

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v2"
	"volcano.sh/volcano/pkg/scheduler/conf"
)

func TestConfsDifferOnlyInTheDevicePlugin(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugins := map[Mode]map[string]map[string]any{}
	for _, m := range Modes {
		file, err := WriteConf(m, root, dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var c conf.SchedulerConfiguration
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			t.Fatalf("%s: not a Volcano scheduler conf: %v", m, err)
		}
		if c.Actions != "enqueue, allocate, backfill, preempt, reclaim" {
			t.Errorf("%s: actions %q, want the shipped conf's", m, c.Actions)
		}
		plugins[m] = map[string]map[string]any{}
		for _, tier := range c.Tiers {
			for _, p := range tier.Plugins {
				args := map[string]any{}
				for k, v := range p.Arguments {
					args[k] = v
				}
				plugins[m][p.Name] = args
			}
		}
	}
	if _, ok := plugins[Tessera]["vgpu"]; !ok {
		t.Error("tessera: no vgpu plugin")
	}
	for _, m := range []Mode{Floor, DeviceShare} {
		if _, ok := plugins[m]["vgpu"]; ok {
			t.Errorf("%s: runs Tessera's vgpu plugin", m)
		}
		for name := range plugins[Tessera] {
			if _, ok := plugins[m][name]; !ok && name != "vgpu" {
				t.Errorf("%s: lacks the shipped conf's plugin %s", m, name)
			}
		}
	}
	// The shipped conf may leave deviceshare out or keep it with VGPUEnable off.
	on := func(m Mode) any { return plugins[m]["deviceshare"]["deviceshare.VGPUEnable"] }
	if on(DeviceShare) != true || on(Floor) == true || on(Tessera) == true {
		t.Errorf("deviceshare.VGPUEnable: floor %v, deviceshare %v, tessera %v; want only deviceshare on", on(Floor), on(DeviceShare), on(Tessera))
	}
}
