package cdi

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// What an agent before the CDI library wrote (sigs.k8s.io/yaml: keys sorted, two-space
// indent) for validSpec(); the library's writer formats the same spec differently.
const earlierAgentsSpec = `cdiVersion: 0.5.0
devices:
- containerEdits:
    env:
    - LD_PRELOAD=/usr/local/tessera/lib/libvgpu.so
    mounts:
    - containerPath: /usr/local/tessera/lib/libvgpu.so
      hostPath: /usr/local/tessera/lib/libvgpu.so
      options:
      - ro
      - bind
      type: bind
  name: hook
kind: tessera.io/vgpu
`

func TestASpecWrittenByAnEarlierAgentIsKeptWhenItHoldsTheSameSpec(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, FileName(HookKind))
	if err := os.WriteFile(file, []byte(earlierAgentsSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := Write(dir, validSpec()); err != nil || changed {
		t.Fatalf("upgrade over an equal spec: changed %v, %v; want the file left alone", changed, err)
	}
	if b, _ := os.ReadFile(file); string(b) != earlierAgentsSpec {
		t.Errorf("file rewritten:\n%s", b)
	}
}

func TestTheWrittenSpecIsWhatTheRuntimesLibraryReads(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir, validSpec()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "tessera.io-vgpu.yaml")
	got, err := cdiapi.ReadSpec(file, 0)
	if err != nil {
		t.Fatalf("the CDI library refuses the written spec: %v", err)
	}
	if !reflect.DeepEqual(got.Spec, validSpec()) {
		t.Errorf("read back %+v, want %+v", got.Spec, validSpec())
	}
	if d := got.GetDevice(HookDevice); d == nil || d.GetQualifiedName() != QualifiedName(HookKind, HookDevice) ||
		d.GetQualifiedName() != "tessera.io/vgpu=hook" {
		t.Errorf("device %v, want tessera.io/vgpu=hook", d)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644 as before", fi.Mode(), err)
	}
}

func TestKindsAreCheckedByTheCDINamingRules(t *testing.T) {
	for kind, ok := range map[string]bool{
		"nvidia.com/gpu": true, "k8s.device-plugin.nvidia.com/gpu": true, "tessera.io/vgpu": true,
		"nvidia.com": false, "/gpu": false, "nvidia.com/": false, "1nvidia.com/gpu": false, "nvidia.com/g:pu": false,
	} {
		if err := ValidateKind(kind); (err == nil) != ok {
			t.Errorf("ValidateKind(%q) = %v, want ok %v", kind, err, ok)
		}
	}
	if got := FileName("k8s.device-plugin.nvidia.com/gpu"); got != "k8s.device-plugin.nvidia.com-gpu.yaml" {
		t.Errorf("FileName = %q", got)
	}
}
