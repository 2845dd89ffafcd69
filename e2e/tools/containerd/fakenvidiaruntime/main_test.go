package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

func TestCreateArgsFindTheBundleAndTheContainer(t *testing.T) {
	for _, tc := range []struct {
		name, args, bundle, id string
		ok                     bool
	}{
		{"the shim's create", "--root /run/runc --log /x/log.json --log-format json create --bundle /b --pid-file /b/pid c1", "/b", "c1", true},
		{"short bundle flag", "create -b /b2 --no-pivot c2", "/b2", "c2", true},
		{"bundle with =", "--debug create --bundle=/b3 c3", "/b3", "c3", true},
		{"no bundle: the working directory", "create c4", ".", "c4", true},
		{"start is left alone", "--root /r start c1", "", "", false},
		{"a global flag's value named create is not the command", "--log create state c1", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, id, ok := createArgs(strings.Fields(tc.args))
			if bundle != tc.bundle || id != tc.id || ok != tc.ok {
				t.Errorf("createArgs(%q) = %q, %q, %t; want %q, %q, %t", tc.args, bundle, id, ok, tc.bundle, tc.id, tc.ok)
			}
		})
	}
}

const toolkitSpec = `cdiVersion: 0.6.0
kind: nvidia.com/gpu
containerEdits:
  env: [TESSERA_STUB_DEVICE_DIR=/run/nvidia-stub/cards]
  deviceNodes: [{path: /dev/nvidiactl, hostPath: /dev/null}]
devices:
- {name: "0", containerEdits: {deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}]}}
- {name: GPU-a, containerEdits: {deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}]}}
- {name: "1", containerEdits: {deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/null}]}}
- {name: GPU-b, containerEdits: {deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/null}]}}
`

func TestEnvModeCardsBecomeTheToolkitsCDIDevices(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte(toolkitSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		visible, nodes string
	}{
		{"GPU-b", "/dev/nvidiactl /dev/nvidia1"},
		{"GPU-a,GPU-b", "/dev/nvidiactl /dev/nvidia0 /dev/nvidia1"},
		{"all", "/dev/nvidiactl /dev/nvidia0 /dev/nvidia1"},
		{"void", ""},
		{"", ""},
	} {
		spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=" + tc.visible}}, Linux: &oci.Linux{}}
		if devices := envDevices(spec); len(devices) > 0 {
			if err := inject(spec, dir, devices); err != nil {
				t.Fatalf("%q: %v", tc.visible, err)
			}
		}
		var nodes []string
		for _, d := range spec.Linux.Devices {
			nodes = append(nodes, d.Path)
		}
		if got := strings.Join(nodes, " "); got != tc.nodes {
			t.Errorf("NVIDIA_VISIBLE_DEVICES=%q: device nodes %q, want %q", tc.visible, got, tc.nodes)
		}
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-z"}}, Linux: &oci.Linux{}}
	if err := inject(spec, dir, envDevices(spec)); err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu=GPU-z") {
		t.Errorf("an unknown card: %v, want an error naming it", err)
	}
}

func TestTheRecordHoldsWhatRuncIsGiven(t *testing.T) {
	dir := t.TempDir()
	limits := filepath.Join(dir, "limits.env")
	if err := os.WriteFile(limits, []byte("version=1\nTESSERA_MEMORY_LIMIT_MIB=512\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	spec := &oci.Spec{
		Annotations: map[string]string{annotationType: "container", annotationName: "main", annotationPod: "p",
			annotationNamespace: "ns", annotationUID: "u1", "tessera.io/container": "ns/p/main"},
		Process: &oci.Process{Args: []string{"/probe", "run"}, Env: []string{"TESSERA_LIMITS_FILE=/var/run/tessera/limits.env"}},
		Mounts: []oci.Mount{{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/var/run/tessera/limits.env", Type: "bind", Source: limits, Options: []string{"rbind", "ro"}}},
		Linux: &oci.Linux{Devices: []oci.LinuxDevice{{Path: "/dev/nvidia1", Type: "c", Major: 1, Minor: 3}}},
	}
	r := newRecord("c1", "gpu-r1", spec)
	if err := r.write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ns_p_u1_main.json")); err != nil {
		t.Fatal(err)
	}
	if len(r.Mounts) != 1 || !r.Mounts[0].ReadOnly || r.LimitsFile["TESSERA_MEMORY_LIMIT_MIB"] != "512" {
		t.Errorf("mounts %+v, limits file %v", r.Mounts, r.LimitsFile)
	}
	if r.Annotations["tessera.io/container"] != "ns/p/main" || r.Annotations[annotationUID] != "" {
		t.Errorf("annotations %v: want the kubelet's, not containerd's own", r.Annotations)
	}
	if len(r.Devices) != 1 || r.Devices[0].HostPath != "c 1:3" || r.Runtime != runtimeName {
		t.Errorf("devices %+v, runtime %q", r.Devices, r.Runtime)
	}
}
