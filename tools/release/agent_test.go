package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkAgentStartsOnNVML runs the image's agent with a one-card NVML library
// (testdata/fakenvml.c) where the NVIDIA container toolkit mounts the driver's, and
// waits for it to discover the card and prepare the host: the image's loader and glibc
// load the library, and the agent gets as far as the API server (none here).
func checkAgentStartsOnNVML(t *testing.T, root string) {
	t.Helper()
	libDir := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu")
	if _, err := os.Stat(libDir); err != nil {
		t.Fatalf("the image has no %s for the toolkit's libraries: %v", "/usr/lib/x86_64-linux-gnu", err)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build the test NVML")
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libnvidia-ml.so.1",
		"-o", filepath.Join(libDir, "libnvidia-ml.so.1"), filepath.Join("testdata", "fakenvml.c")).CombinedOutput(); err != nil {
		t.Fatalf("building the test NVML: %v\n%s", err, out)
	}
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
users: [{name: none, user: {token: none}}]
current-context: none
`
	if err := os.WriteFile(filepath.Join(root, "etc", "kubeconfig"), []byte(kubeconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("chroot", root, "/usr/bin/vgpu-device-plugin", "--node-name=image-test", "--kubeconfig=/etc/kubeconfig",
		"--hook-library=/opt/tessera/lib/libvgpu.so", "--metrics-address=", "-v=2")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log []string
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the agent exited before discovering the card:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			if strings.Contains(l, `"Discovered cards" count=1`) {
				t.Logf("the image's agent: %s", l)
				if !strings.Contains(l, `driver="999.99"`) {
					t.Errorf("discovered without the driver version: %s", l)
				}
				waitForFile(t, filepath.Join(root, "var", "lib", "tessera", "ld.so.preload"), "/opt/tessera/lib/libvgpu.so\n")
				return
			}
		case <-deadline:
			t.Fatalf("no card discovered within a minute:\n%s", strings.Join(log, "\n"))
		}
	}
}

func waitForFile(t *testing.T, file, want string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if b, err := os.ReadFile(file); err == nil && string(b) == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := os.ReadFile(file)
	t.Errorf("%s = %q, %v; want %q (the agent's host preparation)", file, b, err, want)
}
