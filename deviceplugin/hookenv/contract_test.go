package hookenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/records"
	"github.com/tessera-gpu/tessera/deviceplugin/usage"
)

const (
	stubUUID0 = "GPU-7e55e7a0-0000-0000-0000-000000000000"
	stubUUID1 = "GPU-7e55e7a0-0000-0000-0000-000000000001"
	mib       = 1 << 20
	nobody    = "65534"
)

// inContainer runs the real vgpu-core (the contract program on the stub driver, hooked)
// as user nobody in a mount namespace of its own that holds exactly resp's mounts, the way
// a container runtime applies them: single-file bind mounts, read-only ones remounted so.
// It needs root and util-linux's unshare and setpriv; the test is skipped without them.
func inContainer(t *testing.T, lib, prog string, mounts [][3]string, args ...string) *exec.Cmd {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -eu\nmount -t tmpfs -o mode=0755 tessera-test /run\nmkdir -p " + config.ContainerPath + "\n")
	for _, m := range mounts { // container path, host path, "ro" or "rw"
		if st, err := os.Stat(m[1]); err == nil && st.IsDir() {
			fmt.Fprintf(&script, "mkdir -p %s\n", m[0]) // a volume: a directory mount
		} else {
			fmt.Fprintf(&script, ": > %s\n", m[0])
		}
		fmt.Fprintf(&script, "mount --bind %s %s\n", m[1], m[0])
		if m[2] == "ro" {
			fmt.Fprintf(&script, "mount -o remount,bind,ro %s\n", m[0])
			// Not even root in the container may change it.
			fmt.Fprintf(&script, "if (echo x >> %s) 2>/dev/null; then echo '%s is writable'; exit 3; fi\n", m[0], m[0])
		}
	}
	fmt.Fprintf(&script, "exec setpriv --reuid=%s --regid=%s --clear-groups -- %s hold %s\n", nobody, nobody, prog, strings.Join(args, " "))
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script.String())
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TESSERA_") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			env = append(env, kv)
		}
	}
	// No TESSERA_LIMITS_FILE or TESSERA_SHARED_REGION: vgpu-core's fixed limits path, where
	// the mount is, and the region path that file names. Only the stub driver's own
	// settings come from the environment.
	cmd.Env = append(env, "LD_PRELOAD="+lib, "TESSERA_STUB_DEVICES=2", "TESSERA_STUB_MEMORY_MIB=4096")
	return cmd
}

func buildVGPUCore(t *testing.T) (lib, prog string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("vgpu-core builds on Linux only")
	}
	if os.Geteuid() != 0 {
		t.Skip("running vgpu-core behind bind mounts in a mount namespace needs root")
	}
	for _, tool := range []string{"unshare", "setpriv", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	if err := exec.Command("unshare", "--mount", "--propagation", "private", "--", "mount", "-t", "tmpfs", "probe", "/mnt").Run(); err != nil {
		t.Skipf("this machine lets no test mount in a mount namespace: %v", err)
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "vgpu-core"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-s", "-C", dir, "build/libvgpu.so", "build/tests/contract_region").CombinedOutput(); err != nil {
		t.Fatalf("building vgpu-core: %v\n%s", err, out)
	}
	return filepath.Join(dir, "build", "libvgpu.so"), filepath.Join(dir, "build", "tests", "contract_region")
}

// The whole path of a container's files with the real hook library: the agent writes the
// limits file (records.Store.Prepare) and hands it over as this package's one read-only
// mount; the pod's region volume (here a host directory mounted as the kubelet mounts a
// volume) is the container's own. vgpu-core, running as a non-root user, reads its limits
// from the read-only file at the fixed path, creates its region on the volume where that
// file says, and enforces the limits across processes; the agent then reads what it wrote
// from the volume's host side.
func TestContractANonRootContainerKeepsItsRegionOnItsPodsVolume(t *testing.T) {
	lib, prog := buildVGPUCore(t)
	size, err := usage.RegionFileSize()
	if err != nil {
		t.Skip(err)
	}
	store := &records.Store{Root: t.TempDir()}
	rec := &records.Record{Namespace: "ns", Pod: "p", UID: "u", Container: "main", QoS: api.QoSFixedShare, RegionVolume: true,
		Cards: []api.CardAssignment{{UUID: stubUUID0, MemoryMiB: 1024, Cores: 100}, {UUID: stubUUID1, MemoryMiB: 2048, Cores: 50}}}
	c := container(config.HandoffCDI, config.PreloadFile)
	if err := store.Prepare(rec, c.LimitsFile(rec)); err != nil {
		t.Fatal(err)
	}
	hostDir := store.ContainerDir(rec.UID, rec.Container)
	var mounts [][3]string
	for _, m := range c.Response(rec, hostDir).Mounts {
		rw := "rw"
		if m.ReadOnly {
			rw = "ro"
		}
		mounts = append(mounts, [3]string{m.ContainerPath, m.HostPath, rw})
	}
	if len(mounts) != 1 || mounts[0][0] != LimitsPath || mounts[0][2] != "ro" {
		t.Fatalf("the response mounts %v; want only the limits file, read-only", mounts)
	}
	volume := t.TempDir()
	if err := os.Chmod(volume, 0o777); err != nil { // an emptyDir's mode
		t.Fatal(err)
	}
	mounts = append(mounts, [3]string{api.RegionMountPath, volume, "rw"})

	holder := inContainer(t, lib, prog, mounts, "0:100", "1:300")
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = holder.Wait() })
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("the contained program said %q instead of ready", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the contained program not ready after 60 s")
	}

	// A second process of the container: 100 MiB are held on card 0, whose limit (from
	// limits.env) is 1024 MiB, so 1000 more must be refused.
	out, err := inContainer(t, lib, prog, mounts, "0:1000").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot allocate 1000 MiB on card 0") {
		t.Fatalf("a second process allocating past the limit of limits.env: %v\n%s", err, out)
	}

	region := filepath.Join(volume, api.RegionFile(rec.Container))
	u, r, err := usage.NewSampler("/proc", true).Container(region)
	if err != nil {
		t.Fatalf("reading the region vgpu-core initialised: %v", err)
	}
	var pids []int32
	for _, p := range r.Procs {
		pids = append(pids, p.PID)
	}
	if len(r.Procs) == 0 || r.Procs[0].PID != int32(holder.Process.Pid) {
		t.Fatalf("registered processes %v, want the holder (pid %d) first", pids, holder.Process.Pid)
	}
	if u.Cards[0].UsedBytes != 100*mib || u.Cards[1].UsedBytes != 300*mib {
		t.Fatalf("used = %d, %d bytes; the holder allocated 100 MiB and 300 MiB", u.Cards[0].UsedBytes, u.Cards[1].UsedBytes)
	}
	st, err := os.Stat(region)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != size || st.Mode().Perm() != 0o666 {
		t.Errorf("after use the region is %v, %d bytes; want 0666 and %d", st.Mode(), st.Size(), size)
	}
	if b, _ := os.ReadFile(filepath.Join(hostDir, records.LimitsFileName)); string(b) != c.LimitsFile(rec) {
		t.Errorf("limits.env changed: %q", b)
	}
}
