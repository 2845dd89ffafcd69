package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the tests run this binary's main with chosen arguments.
func TestMain(m *testing.M) {
	if os.Getenv("TESSERA_CLI_MAIN") == "1" {
		os.Args = append([]string{"tessera"}, strings.Fields(os.Getenv("TESSERA_CLI_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runMain(t *testing.T, args string, env ...string) (stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"TESSERA_CLI_MAIN=1", "TESSERA_CLI_ARGS=" + args}, env...)...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return errOut.String(), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return errOut.String(), 0
}

func TestExitCodesAndAQuietStart(t *testing.T) {
	home := t.TempDir() // no ~/.kube/config: the case where a Volcano package logs from its init
	missing := filepath.Join(home, "missing")
	for _, c := range []struct {
		args string
		code int
		want string
	}{
		{"", 2, "usage: tessera"},
		{"frobnicate", 2, `unknown command "frobnicate"`},
		{"pod", 2, "pod takes one pod name"},
		{"nodes --kubeconfig " + missing, 1, "tessera nodes: kubeconfig:"},
		// Flags before simulate would reach no simulator: said, not silently ignored.
		{"--kubeconfig " + missing + " simulate --from-cluster", 2, `put every flag after "simulate"`},
	} {
		stderr, code := runMain(t, c.args, "HOME="+home, "KUBECONFIG=")
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("tessera %s: exit %d, want %d; stderr lacks %q:\n%s", c.args, code, c.code, c.want, stderr)
		}
		if strings.Contains(stderr, "hamivgpu") || strings.Contains(stderr, "kubeclient") {
			t.Errorf("tessera %s: a dependency's init log reached the user:\n%s", c.args, stderr)
		}
	}
}

func TestSimulateRunsTheSimulatorFromPath(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"simulated $*\" >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "tessera-simulate"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stderr, code := runMain(t, "simulate -o json", "PATH="+dir)
	if code != 3 || !strings.Contains(stderr, "simulated -o json") {
		t.Errorf("tessera simulate: exit %d, want the simulator's 3; stderr %q", code, stderr)
	}
	stderr, code = runMain(t, "simulate", "PATH="+t.TempDir())
	if code != 1 || !strings.Contains(stderr, "tessera-simulate") {
		t.Errorf("tessera simulate without the simulator: exit %d, want 1 naming tessera-simulate; stderr %q", code, stderr)
	}
}

// The krew layout: kubectl runs ~/.krew/bin/kubectl-tessera, a symlink into the plugin's
// store directory, which holds tessera-simulate beside the real binary.
func TestSimulateRunsTheSimulatorBesideTheRealBinaryOfASymlink(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	store, bin := t.TempDir(), t.TempDir()
	real := filepath.Join(store, "kubectl-tessera")
	if err := os.Link(self, real); err != nil {
		b, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(real, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\necho \"store simulator $*\" >&2\nexit 4\n"
	if err := os.WriteFile(filepath.Join(store, "tessera-simulate"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(bin, "kubectl-tessera")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, "-test.run=^$")
	cmd.Env = append(os.Environ(), "TESSERA_CLI_MAIN=1", "TESSERA_CLI_ARGS=simulate -o text", "PATH="+t.TempDir())
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 || !strings.Contains(errOut.String(), "store simulator -o text") {
		t.Errorf("kubectl-tessera simulate through a symlink: %v; stderr %q; want the store's tessera-simulate (exit 4)", err, errOut.String())
	}
}
