package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// With CDI on, the named devices' edits reach the container and an undefined name fails
// the creation, as in containerd with enable_cdi.
func TestCDIDevicesAreResolvedOrRefused(t *testing.T) {
	dir := t.TempDir()
	cdiDir := filepath.Join(dir, "cdi")
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	specs := map[string]string{
		"nvidia.yaml": "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes: [{path: /dev/nvidiactl}]\n" +
			"devices:\n- name: GPU-a\n  containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}\n- name: GPU-b\n  containerEdits: {deviceNodes: [{path: /dev/nvidia1}]}\n",
		"tessera.io-vgpu.yaml": "cdiVersion: 0.5.0\nkind: tessera.io/vgpu\ndevices:\n- name: hook\n  containerEdits:\n    env: [LD_PRELOAD=/lib/hook.so]\n" +
			"    mounts: [{hostPath: /lib/hook.so, containerPath: /lib/hook.so, type: bind, options: [ro, bind]}]\n",
		"notes.txt": "kind: other/thing",
	}
	for name, body := range specs {
		if err := os.WriteFile(filepath.Join(cdiDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := newRuntime(fake.NewFakeRemoteRuntime(), filepath.Join(dir, "records"), "node-1", cdiDir)
	if err := os.MkdirAll(r.recordDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}}})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, devices ...string) (*Record, error) {
		cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Labels: map[string]string{labelPodName: "p", labelPodNamespace: "ns", labelPodUID: "u1", labelContainer: name},
			Envs:   []*runtimeapi.KeyValue{{Key: "NVIDIA_VISIBLE_DEVICES", Value: "void"}, {Key: "LD_PRELOAD", Value: "/other.so"}}}
		for _, d := range devices {
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d})
		}
		if _, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cfg,
			SandboxConfig: &runtimeapi.PodSandboxConfig{}}); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(r.recordDir, "ns_p_u1_"+name+".json"))
		if err != nil {
			return nil, err
		}
		var rec Record
		return &rec, json.Unmarshal(b, &rec)
	}
	rec, err := create("main", "nvidia.com/gpu=GPU-b", "tessera.io/vgpu=hook")
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, d := range rec.Devices {
		devs = append(devs, d.ContainerPath)
	}
	if strings.Join(devs, " ") != "/dev/nvidiactl /dev/nvidia1" {
		t.Errorf("device nodes %v, want the spec's common node and GPU-b's", devs)
	}
	if rec.Env["LD_PRELOAD"] != "/lib/hook.so" || len(rec.Mounts) != 1 || !rec.Mounts[0].ReadOnly || rec.Mounts[0].ContainerPath != "/lib/hook.so" {
		t.Errorf("hook edits not applied: env %v mounts %+v", rec.Env, rec.Mounts)
	}
	if strings.Join(rec.CDIDevices, " ") != "nvidia.com/gpu=GPU-b tessera.io/vgpu=hook" {
		t.Errorf("CDI devices recorded as %v", rec.CDIDevices)
	}
	_, err = create("side", "nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-z", "other.com/x=1")
	if err == nil || !strings.Contains(err.Error(), "unresolvable CDI devices nvidia.com/gpu=GPU-z, other.com/x=1") {
		t.Errorf("undefined devices: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.recordDir, "ns_p_u1_side.json")); !os.IsNotExist(err) {
		t.Errorf("a refused container was recorded: %v", err)
	}
}

// A DRA driver writes one spec per claim, all of one kind: their devices add up, as in
// the CDI library's cache; a device two files of one directory define is refused.
func TestCDISpecsOfOneKindAddUpAndConflictsAreRefused(t *testing.T) {
	dir := t.TempDir()
	claim := func(uid, env string) string {
		return "cdiVersion: 0.6.0\nkind: vgpu.tessera.io/claim\ncontainerEdits:\n  env: [" + env + "]\n" +
			"devices:\n- name: " + uid + "-card-0\n  containerEdits: {env: [CARD_OF_" + uid + "=0]}\n"
	}
	for name, body := range map[string]string{
		"vgpu.tessera.io-claim_u1.yaml": claim("u1", "LIMIT=1"),
		"vgpu.tessera.io-claim_u2.yaml": claim("u2", "LIMIT=2"),
		"vgpu.tessera.io-claim_x1.yaml": claim("dup", "LIMIT=3"),
		"vgpu.tessera.io-claim_x2.yaml": claim("dup", "LIMIT=4"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ dev, want string }{
		{"vgpu.tessera.io/claim=u1-card-0", "LIMIT=1 CARD_OF_u1=0"},
		{"vgpu.tessera.io/claim=u2-card-0", "LIMIT=2 CARD_OF_u2=0"},
	} {
		edits, err := resolveCDI([]string{dir}, []string{c.dev})
		if err != nil {
			t.Fatalf("%s: %v", c.dev, err)
		}
		var env []string
		for _, e := range edits {
			env = append(env, e.Env...)
		}
		if strings.Join(env, " ") != c.want {
			t.Errorf("%s: env %v, want %s (its own spec's common and device edits)", c.dev, env, c.want)
		}
	}
	if _, err := resolveCDI([]string{dir}, []string{"vgpu.tessera.io/claim=dup-card-0"}); err == nil ||
		!strings.Contains(err.Error(), "defined by more than one spec") {
		t.Errorf("a device defined twice in one directory: %v, want a conflict", err)
	}
	later := t.TempDir()
	if err := os.WriteFile(filepath.Join(later, "override.yaml"), []byte(claim("u1", "LIMIT=9")), 0o644); err != nil {
		t.Fatal(err)
	}
	edits, err := resolveCDI([]string{dir, later}, []string{"vgpu.tessera.io/claim=u1-card-0"})
	if err != nil || len(edits) != 2 || edits[0].Env[0] != "LIMIT=9" {
		t.Errorf("a later directory's definition: %+v %v, want it to replace the earlier one", edits, err)
	}
}
