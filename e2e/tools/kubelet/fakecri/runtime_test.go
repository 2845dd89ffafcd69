package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

func TestSleepTime(t *testing.T) {
	cases := []struct {
		name    string
		command []string
		args    []string
		want    time.Duration
		ok      bool
	}{
		{"sleep N runs N seconds", []string{"sleep", "3"}, nil, 3 * time.Second, true},
		{"the duration may come as an argument", []string{"sleep"}, []string{"0.5"}, 500 * time.Millisecond, true},
		{"sh -c sleep counts", []string{"sh", "-c", "sleep 2"}, nil, 2 * time.Second, true},
		{"sleep infinity runs until stopped", []string{"sleep", "infinity"}, nil, 0, false},
		{"any other command runs until stopped", []string{"python", "train.py"}, nil, 0, false},
		{"a negative duration runs until stopped", []string{"sleep", "-1"}, nil, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := sleepTime(&runtimeapi.ContainerConfig{Command: c.command, Args: c.args})
			if got != c.want || ok != c.ok {
				t.Errorf("sleepTime(%v %v) = %v, %t; want %v, %t", c.command, c.args, got, ok, c.want, c.ok)
			}
		})
	}
}

func TestHostPathPrefersTheMostSpecificMount(t *testing.T) {
	mounts := []Mount{{ContainerPath: "/", HostPath: "/root-fs"}, {ContainerPath: "/tessera", HostPath: "/state/c1"}}
	if got := hostPath("/tessera/limits.env", mounts); got != "/state/c1/limits.env" {
		t.Errorf("got %q", got)
	}
	if got := hostPath("/tesseract/x", mounts[1:]); got != "" {
		t.Errorf("a sibling path mapped to %q", got)
	}
}

// A created container is recorded as the kubelet passed it, with the limits file read
// through its mounts and its log file created; a `sleep` container exits on its own.
func TestCreateRecordsAndSleepExits(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "limits.env"), []byte("version=1\nTESSERA_SM_LIMIT=30\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(fake.NewFakeRemoteRuntime(), filepath.Join(dir, "records"), "node-1")
	if err := os.MkdirAll(r.recordDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"}, LogDirectory: filepath.Join(dir, "logs")}})
	if err != nil {
		t.Fatal(err)
	}
	req := &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId,
		SandboxConfig: &runtimeapi.PodSandboxConfig{LogDirectory: filepath.Join(dir, "logs")},
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"sleep", "0.05"}, LogPath: "main/0.log",
			Labels:     map[string]string{labelPodName: "p", labelPodNamespace: "ns", labelPodUID: "u1", labelContainer: "main"},
			Envs:       []*runtimeapi.KeyValue{{Key: limitsFileEnv, Value: "/tessera/limits.env"}},
			Mounts:     []*runtimeapi.Mount{{ContainerPath: "/tessera", HostPath: state}},
			CDIDevices: []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=0"}}}}
	created, err := r.CreateContainer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(r.recordDir, "ns_p_u1_main.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Node != "node-1" || rec.LimitsFile["TESSERA_SM_LIMIT"] != "30" || len(rec.CDIDevices) != 1 || len(rec.Mounts) != 1 {
		t.Errorf("record %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "main", "0.log")); err != nil {
		t.Errorf("no log file: %v", err)
	}
	if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := r.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: created.ContainerId})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			if st.Status.ExitCode != 0 || st.Status.LogPath == "" {
				t.Errorf("exited with %d, log path %q", st.Status.ExitCode, st.Status.LogPath)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %v after 5 s", st.Status.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
