package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

func validSpec() *specs.Spec {
	return &specs.Spec{Version: Version, Kind: HookKind, Devices: []specs.Device{{Name: HookDevice, ContainerEdits: specs.ContainerEdits{
		Env:    []string{"LD_PRELOAD=/usr/local/tessera/lib/libvgpu.so"},
		Mounts: []*specs.Mount{{HostPath: "/usr/local/tessera/lib/libvgpu.so", ContainerPath: "/usr/local/tessera/lib/libvgpu.so", Type: "bind", Options: []string{"ro", "bind"}}},
	}}}}
}

func TestValidateAppliesTheCDIRules(t *testing.T) {
	tests := []struct {
		name string
		edit func(s *specs.Spec)
		want []string // substrings of the error; none = valid
	}{
		{"the agent's hook spec is valid", func(*specs.Spec) {}, nil},
		{"UUID device names and a vendor with dots are valid", func(s *specs.Spec) {
			s.Kind, s.Devices[0].Name = "nvidia.com/gpu", "GPU-3f2a9c1e-0b4d-4c55-9a3e-1d2c3b4a5f60"
		}, nil},
		{"a name starting with a digit is valid (0.5.0 and later)", func(s *specs.Spec) { s.Devices[0].Name = "0" }, nil},
		{"an unknown cdiVersion is refused", func(s *specs.Spec) { s.Version = "0.9.9" }, []string{`cdiVersion "0.9.9"`}},
		{"a cdiVersion older than the features the spec uses is refused (typed mounts are 0.4.0)", func(s *specs.Spec) { s.Version = "0.3.0" },
			[]string{`cdiVersion "0.3.0"`, "at least v0.4.0"}},
		{"a kind without a class is refused", func(s *specs.Spec) { s.Kind = "tessera.io" }, []string{"not vendor/class"}},
		{"a class with a dot is refused at 0.5.0", func(s *specs.Spec) { s.Kind = "tessera.io/v.gpu" }, []string{"at least v0.6.0"}},
		{"a class with a dot is valid from 0.6.0", func(s *specs.Spec) { s.Kind, s.Version = "tessera.io/v.gpu", "0.6.0" }, nil},
		{"a class with a colon is refused", func(s *specs.Spec) { s.Kind = "tessera.io/v:gpu" }, []string{"invalid class", `"v:gpu"`}},
		{"a vendor starting with a digit is refused", func(s *specs.Spec) { s.Kind = "1tessera.io/vgpu" }, []string{"invalid vendor", "should start with letter"}},
		{"a device name with a slash is refused", func(s *specs.Spec) { s.Devices[0].Name = "a/b" }, []string{`device name "a/b"`}},
		{"a device name ending in a dash is refused", func(s *specs.Spec) { s.Devices[0].Name = "hook-" }, []string{"should end with a letter or digit"}},
		{"a spec without devices is refused", func(s *specs.Spec) { s.Devices = nil }, []string{"devices: none"}},
		{"two devices of one name are refused", func(s *specs.Spec) { s.Devices = append(s.Devices, s.Devices[0]) }, []string{`name "hook" twice`}},
		{"a device without edits is refused", func(s *specs.Spec) { s.Devices[0].ContainerEdits = specs.ContainerEdits{} }, []string{"containerEdits empty"}},
		{"env without = is refused", func(s *specs.Spec) { s.Devices[0].ContainerEdits.Env = []string{"LD_PRELOAD"} }, []string{`invalid environment variable "LD_PRELOAD"`}},
		{"a mount without a container path is refused", func(s *specs.Spec) { s.Devices[0].ContainerEdits.Mounts[0].ContainerPath = "" }, []string{"empty container path"}},
		{"a mount without a host path is refused", func(s *specs.Spec) { s.Devices[0].ContainerEdits.Mounts[0].HostPath = "" }, []string{"empty host path"}},
		{"a device node type other than b, c, u, p is refused", func(s *specs.Spec) {
			s.Devices[0].ContainerEdits.DeviceNodes = []*specs.DeviceNode{{Path: "/dev/nvidia0", Type: "x"}}
		}, []string{`type "x"`}},
		{"an unknown hook point is refused", func(s *specs.Spec) {
			s.Devices[0].ContainerEdits.Hooks = []*specs.Hook{{HookName: "preStart", Path: "/bin/true"}}
		}, []string{`hook name "preStart"`}},
		{"every problem is reported at once", func(s *specs.Spec) { s.Version, s.Kind = "", "x" }, []string{"cdiVersion", "not vendor/class"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.edit(s)
			err := Validate(s)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("valid spec refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestWriteReplacesTheSpecAtomicallyAndOnlyWhenItChanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi")
	s := validSpec()
	changed, err := Write(dir, s)
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	file := filepath.Join(dir, "tessera.io-vgpu.yaml")
	before, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := Write(dir, validSpec()); err != nil || changed {
		t.Errorf("same spec again: changed %v, %v; want untouched", changed, err)
	}
	s.Devices[0].ContainerEdits.Env = []string{"LD_PRELOAD=/opt/other.so"}
	if changed, err := Write(dir, s); err != nil || !changed {
		t.Fatalf("changed spec: changed %v, %v", changed, err)
	}
	after, _ := os.Stat(file)
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, not replaced by rename")
	}
	names, problems := DeviceNames([]string{dir}, HookKind)
	if _, ok := names[HookDevice]; !ok || len(problems) > 0 {
		t.Errorf("written spec reads back as %v, problems %v", names, problems)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want only the spec (no temporary left)", len(entries))
	}
	s.Kind = "bad"
	if _, err := Write(dir, s); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid spec written: %v", err)
	}
}

func TestDeviceNamesReadsEveryFileOfTheKind(t *testing.T) {
	etc, run := t.TempDir(), t.TempDir()
	nvidia := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}\n" +
		"- name: GPU-a\n  containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}\ncontainerEdits: {env: [NVIDIA_VISIBLE_DEVICES=void]}\n"
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(etc, "nvidia.yaml"), []byte(nvidia), 0o644))
	must(os.WriteFile(filepath.Join(run, "other.json"), []byte(`{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"GPU-b","containerEdits":{"env":["A=1"]}}]}`), 0o644))
	must(os.WriteFile(filepath.Join(run, "vendor.yaml"), []byte("cdiVersion: 0.5.0\nkind: example.com/net\ndevices: [{name: GPU-c, containerEdits: {env: [A=1]}}]\n"), 0o644))
	must(os.WriteFile(filepath.Join(run, "broken.yaml"), []byte("kind: [\n"), 0o644))
	must(os.WriteFile(filepath.Join(run, "notes.txt"), []byte("kind: nvidia.com/gpu"), 0o644))
	names, problems := DeviceNames([]string{etc, run, filepath.Join(run, "absent")}, "nvidia.com/gpu")
	for _, n := range []string{"0", "GPU-a", "GPU-b"} {
		if _, ok := names[n]; !ok {
			t.Errorf("device %q not found in %v", n, names)
		}
	}
	if _, ok := names["GPU-c"]; ok || len(names) != 3 {
		t.Errorf("names %v: want only nvidia.com/gpu devices", names)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "broken.yaml") {
		t.Errorf("problems %v, want the broken file named", problems)
	}
}
