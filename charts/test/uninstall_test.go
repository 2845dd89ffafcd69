package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func agentPod(t *testing.T, r *Rendered) corev1.PodSpec {
	t.Helper()
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	return ds.Spec.Template.Spec
}

// cleanupContainer returns the hook-library-cleanup container, or nil.
func cleanupContainer(spec corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == "hook-library-cleanup" {
			return &spec.Containers[i]
		}
	}
	return nil
}

// By default the agent may watch its own DaemonSet and nothing else, so that it empties
// the state directory on helm uninstall; the hook library, which the agent mounts
// read-only, is removed by the cleanup container beside it, the only running container
// that may write that directory.
func TestTheAgentMayWatchOnlyItsOwnDaemonSetToCleanUpOnUninstall(t *testing.T) {
	r := MustRender(t, "")
	var role rbacv1.Role
	r.Get(t, "Role", "gpu-tessera-vgpu-device-plugin-uninstall", &role)
	if role.Namespace != "volcano-system" || len(role.Rules) != 1 {
		t.Fatalf("uninstall Role in %q with rules %+v, want one rule in the release namespace", role.Namespace, role.Rules)
	}
	rule := role.Rules[0]
	if strings.Join(rule.APIGroups, ",") != "apps" || strings.Join(rule.Resources, ",") != "daemonsets" ||
		strings.Join(rule.ResourceNames, ",") != "gpu-tessera-vgpu-device-plugin" || strings.Join(rule.Verbs, ",") != "get,list,watch" {
		t.Errorf("uninstall Role rule %+v, want get/list/watch of daemonsets/gpu-tessera-vgpu-device-plugin only", rule)
	}
	var rb rbacv1.RoleBinding
	r.Get(t, "RoleBinding", "gpu-tessera-vgpu-device-plugin-uninstall", &rb)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "gpu-tessera-vgpu-device-plugin" || rb.Subjects[0].Namespace != "volcano-system" ||
		rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("uninstall RoleBinding subjects %+v roleRef %+v", rb.Subjects, rb.RoleRef)
	}
	spec := agentPod(t, r)
	if m := mounts(&spec.Containers[0])["hook-library"]; !m.ReadOnly {
		t.Error("the agent mounts the hook library writable: a compromised agent could replace what every vGPU container preloads")
	}
	c := cleanupContainer(spec)
	if c == nil {
		t.Fatalf("no hook-library-cleanup container: %v", spec.Containers)
	}
	m := mounts(c)
	if m["hook-library"].ReadOnly || m["hook-library"].MountPath != "/usr/local/tessera/lib" || !m["state"].ReadOnly ||
		m["state"].MountPath != "/var/lib/tessera" || len(m) != 2 {
		t.Errorf("cleanup container mounts %+v, want the hook directory writable and the state directory read-only", m)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["LIB"] != "/usr/local/tessera/lib/libvgpu.so" || env["STATE"] != "/var/lib/tessera" ||
		env["PROBE"] != "http://127.0.0.1:9394/healthz" {
		t.Errorf("cleanup container env %v", env)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("cleanup container security context %+v", sc)
	}
}

// The cleanup script, run by a real shell against a fake agent: on SIGTERM it waits for
// the agent to stop, then removes the library only if the state directory was emptied.
func TestTheCleanupContainerRemovesTheLibraryOnlyAfterTheAgentEmptiedItsState(t *testing.T) {
	if _, err := exec.LookPath("busybox"); err != nil {
		// The script calls busybox for the applets the image does not link; a shim runs
		// them with the host's tools.
		t.Log("no busybox on PATH: a shim stands in")
	}
	c := cleanupContainer(agentPod(t, MustRender(t, "")))
	script := c.Args[0]
	for _, emptied := range []bool{true, false} {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		lib := filepath.Join(dir, "lib")
		state := filepath.Join(dir, "state")
		for _, d := range []string{bin, lib, state} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := exec.LookPath("busybox"); err != nil {
			shim := "#!/bin/sh\ncmd=$1; shift\ncase $cmd in wget) exit 1;; *) exec \"$cmd\" \"$@\";; esac\n"
			if err := os.WriteFile(filepath.Join(bin, "busybox"), []byte(shim), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		libFile := filepath.Join(lib, "libvgpu.so")
		os.WriteFile(libFile, []byte("elf"), 0o644)
		if !emptied {
			os.WriteFile(filepath.Join(state, "ld.so.preload"), []byte(libFile), 0o644)
		}
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "LIB="+libFile, "STATE="+state,
			"PROBE=http://127.0.0.1:1/healthz")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Once the shell waits on its sleep its trap is set: stop it as the kubelet would.
		child := waitForChild(t, cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		if child > 0 {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
		if err != nil {
			t.Errorf("emptied=%v: the script exited with %v", emptied, err)
		}
		_, err = os.Stat(libFile)
		if gone := os.IsNotExist(err); gone != emptied {
			t.Errorf("state emptied %v: library removed %v", emptied, gone)
		}
	}
}

func TestKeepingHostFilesDropsTheRoleAndTheCleanupContainer(t *testing.T) {
	r := MustRender(t, "testdata/keep-host-files.yaml")
	for _, n := range r.Names() {
		if strings.Contains(n, "-uninstall") {
			t.Errorf("%s rendered with removeHostFilesOnUninstall: false", n)
		}
	}
	spec := agentPod(t, r)
	if cleanupContainer(spec) != nil || len(spec.Containers) != 1 {
		t.Errorf("containers %v with removeHostFilesOnUninstall: false, want the agent alone", spec.Containers)
	}
	if !mounts(&spec.Containers[0])["hook-library"].ReadOnly {
		t.Error("the agent mounts the hook library writable")
	}
}

func TestTheUninstallRoleIsBoundToTheAgentsServiceAccount(t *testing.T) {
	r := MustRender(t, "testdata/agent-service-account.yaml")
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	var rb rbacv1.RoleBinding
	r.Get(t, "RoleBinding", "gpu-tessera-vgpu-device-plugin-uninstall", &rb)
	if sa := ds.Spec.Template.Spec.ServiceAccountName; sa != "gpu-agent" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa {
		t.Errorf("the agent runs as %q, the uninstall RoleBinding binds %+v", sa, rb.Subjects)
	}
}

// waitForChild waits for a child of pid to appear (the shell's sleep) and returns its pid.
func waitForChild(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pid) {
				child, _ := strconv.Atoi(p.Name())
				return child
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the cleanup script started no sleep")
	return 0
}
