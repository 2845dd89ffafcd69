package suite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

// hookInstallContainer is the init container of the chart's agent DaemonSet that puts
// libvgpu.so on the node.
const hookInstallContainer = "install-hook-library"

// minUpgrades is how many times the hook library is installed at least while probe
// containers start, alternating two builds.
const minUpgrades = 20

// hookUpgradeKeepsRunningContainers upgrades the hook library on the host with the chart's
// own install-hook-library command, as `helm upgrade` to a new library runs it on each node
// (renderHookInstall), while the probes run and while new probe containers start. The
// command runs back to back, at least minUpgrades times, alternating two builds of the
// library that differ from the one the probes loaded and from each other
// (buildHookLibraries), from before the first new probe is submitted until all of them
// run. Each run must leave a new inode at the library's path holding exactly its build,
// mode 0755, and no .tmp file. Two new probe containers start on each real-runtime node
// meanwhile: each passes the probe's checks (its cards and limits) and maps a complete
// library at its path, never a .tmp: the inode of one of the installed files, its content
// (read through /proc/<pid>/map_files) exactly one of the two builds. The probes started
// before live on with the library inode they started with. The new probes' jobs are
// deleted afterwards. It returns the inode of the file installed last, which later
// containers must map.
func hookUpgradeKeepsRunningContainers(t *testing.T, namespace string, pids map[string]int) uint64 {
	t.Helper()
	ctx := context.Background()
	stepStart := time.Now()
	lib := cl.HookLibrary()
	inst := renderHookInstall(t)
	if inst.dst != lib {
		t.Fatalf("the chart's %s writes %s on the host, the agents hand containers %s", hookInstallContainer, inst.dst, lib)
	}
	builds := buildHookLibraries(t, lib)
	old := inodeOf(t, lib)
	started := map[string]string{}
	for k, pid := range pids {
		started[k] = processStart(pid)
	}

	stop, first := make(chan struct{}), make(chan struct{})
	result := make(chan upgradeRun, 1)
	go func() { result <- inst.repeat(builds, stop, first) }()
	var run upgradeRun
	stopped := false
	stopUpgrades := func() upgradeRun {
		if !stopped {
			close(stop)
			run, stopped = <-result, true
		}
		return run
	}
	defer stopUpgrades()
	select {
	case <-first:
	case r := <-result:
		run, stopped = r, true
		t.Fatalf("the chart's %s failed after %d runs: %v", hookInstallContainer, r.count, errors.Join(r.errs...))
	}
	begun := time.Now()
	var jobs []string
	for _, n := range realNodes {
		j := probeJob(namespace, n.Name)
		j.Name = "upgrade-" + n.Name
		j.Spec.Tasks[0].Replicas = 2
		spec := &j.Spec.Tasks[0].Template.Spec
		spec.Containers = spec.Containers[:1]
		submit(t, j)
		jobs = append(jobs, j.Name)
	}
	var probes []corev1.Pod
	for _, j := range jobs {
		ps, err := workload.WaitPods(ctx, cl.Client, namespace, j, 2*time.Minute, workload.AllPhase(2, corev1.PodRunning))
		if err != nil {
			t.Fatalf("probe job %s while the hook library was upgraded: %v", j, err)
		}
		probes = append(probes, ps...)
	}
	run = stopUpgrades()
	for _, err := range run.errs {
		t.Error(err)
	}
	t.Logf("the chart's %s ran %d times in %s, alternating two builds, while %d probe pods started (Running %s after submission)",
		hookInstallContainer, run.count, run.took.Round(100*time.Millisecond), len(probes), time.Since(begun).Round(100*time.Millisecond))
	if run.count < minUpgrades {
		t.Errorf("%d upgrades, want at least %d", run.count, minUpgrades)
	}

	got := map[string]int{}
	for _, p := range probes {
		r := checkOneProbe(t, p, "started during the hook library's upgrades")
		pid, err := containerProcess(r.ID, cluster.ProbePath)
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
			continue
		}
		ino, sum, err := mappedHook(pid, lib)
		switch {
		case err != nil:
			t.Errorf("%s (host pid %d): %v", p.Name, pid, err)
		case !run.inodes[ino]:
			t.Errorf("%s (host pid %d) maps hook library inode %d, none of the %d files the upgrades installed", p.Name, pid, ino, run.count)
		case sum != builds[0].sum && sum != builds[1].sum:
			t.Errorf("%s (host pid %d) maps hook library inode %d with sha256 %s, neither build (%s, %s): a partial library",
				p.Name, pid, ino, sum, builds[0].sum, builds[1].sum)
		case sum == builds[0].sum:
			got[builds[0].name]++
		default:
			got[builds[1].name]++
		}
	}
	t.Logf("the %d probe containers started during the upgrades each map a complete library: build a in %d, build b in %d",
		len(probes), got["a"], got["b"])

	upgraded := inodeOf(t, lib)
	if upgraded != run.last {
		t.Errorf("the hook library's inode is %d, the last upgrade installed %d", upgraded, run.last)
	}
	if st, err := os.Stat(lib); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the hook library after the upgrades: %v, %v; want mode 0755", st.Mode(), err)
	}
	if left := tmpFiles(filepath.Dir(lib)); len(left) > 0 {
		t.Errorf("the hook library's directory holds %v after the upgrades", left)
	}
	for k, pid := range pids {
		if processStart(pid) != started[k] {
			t.Errorf("%s: process %d did not survive the hook library's upgrades", k, pid)
			continue
		}
		if got := hookInode(pid); got != old {
			t.Errorf("%s: process %d maps hook library inode %d after the upgrades, want the one it started with, %d", k, pid, got, old)
		}
	}
	t.Logf("hook library upgraded %d times under %d running probe processes (inode %d -> %d): each still maps the one it started with",
		run.count, len(pids), old, upgraded)

	// The new probes' cards go back before the scenario's next steps.
	for _, j := range jobs {
		if err := cl.Volcano.BatchV1alpha1().Jobs(namespace).Delete(ctx, j, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var left int
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = 0
		for _, j := range jobs {
			ps, err := workload.Pods(ctx, cl.Client, namespace, j)
			if err != nil {
				return false, nil
			}
			left += len(ps)
		}
		return left == 0, nil
	}); err != nil {
		t.Fatalf("%d probe pods of %v left after their jobs were deleted", left, jobs)
	}
	t.Logf("the hook library's upgrades, with their probes deleted again, took %s", time.Since(stepStart).Round(100*time.Millisecond))
	return upgraded
}

// hookInstall is the chart's install-hook-library init container as Helm renders it,
// mapped to this host: its command, run as written by the host's /bin/sh, its
// environment with DST the library's host path, and its security context as setpriv's
// options.
type hookInstall struct {
	command []string
	env     map[string]string
	dst     string
	setpriv []string
}

// renderHookInstall renders the chart's agent DaemonSet with `helm template`, with the
// hook library at the path the harness's agents use, and takes its install-hook-library
// init container. The test fails where the container no longer has a shape the test can
// run on the host: a command other than /bin/sh -c SCRIPT, an environment not written out
// as values, no SRC or DST, a DST outside a writable hostPath mount, or a security
// context that adds capabilities.
func renderHookInstall(t *testing.T) hookInstall {
	t.Helper()
	helm := helmCLI{bin: cl.Opts.Bin.Helm, kubeconfig: cl.Kubeconfig, dir: t.TempDir()}
	out := helm.run(t, "template", cluster.HarnessRelease, filepath.Join("..", "..", "charts", "tessera"),
		"--namespace", cluster.HarnessNamespace, "--kube-version", "1.34.2", "--show-only", "templates/device-plugin.yaml",
		"--set-string", "devicePlugin.config.hookLibrary="+cl.HookLibrary())
	ds, err := renderedDaemonSet([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := hookInstallOf(ds)
	if err != nil {
		t.Fatalf("the chart's %s changed shape, so this test cannot run it on the node: %v", hookInstallContainer, err)
	}
	t.Logf("the chart's %s as rendered: %q, DST=%s, %v", hookInstallContainer, inst.command, inst.dst, inst.setpriv)
	return inst
}

// renderedDaemonSet is the one DaemonSet in rendered manifests.
func renderedDaemonSet(manifests []byte) (*appsv1.DaemonSet, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var found *appsv1.DaemonSet
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("the rendered chart: %w", err)
		}
		if raw["kind"] != "DaemonSet" {
			continue
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		if found != nil {
			return nil, errors.New("the chart's device-plugin.yaml renders more than one DaemonSet")
		}
		found = &appsv1.DaemonSet{}
		if err := json.Unmarshal(b, found); err != nil {
			return nil, fmt.Errorf("the rendered DaemonSet: %w", err)
		}
	}
	if found == nil {
		return nil, errors.New("the chart's device-plugin.yaml renders no DaemonSet")
	}
	return found, nil
}

// hookInstallOf maps the DaemonSet's install-hook-library container to this host.
func hookInstallOf(ds *appsv1.DaemonSet) (hookInstall, error) {
	spec := ds.Spec.Template.Spec
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == hookInstallContainer })
	if i < 0 {
		return hookInstall{}, fmt.Errorf("DaemonSet %s has no init container %s", ds.Name, hookInstallContainer)
	}
	c := spec.InitContainers[i]
	command := append(slices.Clone(c.Command), c.Args...)
	if len(command) != 3 || command[0] != "/bin/sh" || command[1] != "-c" {
		return hookInstall{}, fmt.Errorf("command %q, args %q: want /bin/sh -c SCRIPT", c.Command, c.Args)
	}
	if len(c.EnvFrom) > 0 {
		return hookInstall{}, fmt.Errorf("envFrom %+v: only values written out can be run here", c.EnvFrom)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return hookInstall{}, fmt.Errorf("env %s comes from %+v: only values written out can be run here", e.Name, e.ValueFrom)
		}
		env[e.Name] = e.Value
	}
	if env["SRC"] == "" || !filepath.IsAbs(env["DST"]) {
		return hookInstall{}, fmt.Errorf("env SRC=%q DST=%q: want the library's path in the image and an absolute path on the node", env["SRC"], env["DST"])
	}
	dst, err := hostPathOf(env["DST"], c.VolumeMounts, spec.Volumes)
	if err != nil {
		return hookInstall{}, err
	}
	setpriv, err := setprivOptions(spec.SecurityContext, c.SecurityContext)
	if err != nil {
		return hookInstall{}, err
	}
	env["DST"] = dst
	return hookInstall{command: command, env: env, dst: dst, setpriv: setpriv}, nil
}

// hostPathOf is the host path of path in a container: under the deepest of its writable
// mounts of a hostPath volume that holds it.
func hostPathOf(path string, mounts []corev1.VolumeMount, volumes []corev1.Volume) (string, error) {
	var best *corev1.VolumeMount
	for i, m := range mounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &mounts[i]
		}
	}
	if best == nil {
		return "", fmt.Errorf("DST %s is under none of the container's mounts", path)
	}
	if best.ReadOnly || best.SubPath != "" || best.SubPathExpr != "" {
		return "", fmt.Errorf("DST %s is under mount %s (readOnly %v, subPath %q): want a writable mount of a whole volume", path,
			best.MountPath, best.ReadOnly, best.SubPath+best.SubPathExpr)
	}
	i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == best.Name })
	if i < 0 || volumes[i].HostPath == nil {
		return "", fmt.Errorf("DST %s is under mount %s of volume %q, which is not a hostPath volume", path, best.MountPath, best.Name)
	}
	rel, err := filepath.Rel(best.MountPath, path)
	if err != nil {
		return "", err
	}
	return filepath.Join(volumes[i].HostPath.Path, rel), nil
}

// setprivOptions are setpriv's options that run a command as a container with these
// security contexts runs it: its user and group, no capability where it drops ALL, no new
// privileges where it allows no escalation.
func setprivOptions(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) ([]string, error) {
	var user, group *int64
	if pod != nil {
		user, group = pod.RunAsUser, pod.RunAsGroup
	}
	var opts []string
	if c != nil {
		if c.RunAsUser != nil {
			user = c.RunAsUser
		}
		if c.RunAsGroup != nil {
			group = c.RunAsGroup
		}
		if c.Capabilities != nil {
			if len(c.Capabilities.Add) > 0 {
				return nil, fmt.Errorf("securityContext.capabilities.add %v: this test runs it with no capability", c.Capabilities.Add)
			}
			if slices.Contains(c.Capabilities.Drop, "ALL") {
				opts = append(opts, "--inh-caps=-all", "--bounding-set=-all")
			}
		}
		if c.AllowPrivilegeEscalation != nil && !*c.AllowPrivilegeEscalation {
			opts = append(opts, "--no-new-privs")
		}
	}
	if user != nil {
		opts = append(opts, "--reuid="+strconv.FormatInt(*user, 10))
	}
	if group != nil {
		opts = append(opts, "--regid="+strconv.FormatInt(*group, 10), "--clear-groups")
	}
	return opts, nil
}

// install runs the rendered command once with SRC set to src.
func (h hookInstall) install(src string) error {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	for k, v := range h.env {
		if k == "SRC" {
			v = src
		}
		env = append(env, k+"="+v)
	}
	cmd := exec.Command("setpriv", append(append(slices.Clone(h.setpriv), "--"), h.command...)...)
	cmd.Env, cmd.Dir = env, "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%q with SRC=%s DST=%s under setpriv %v: %w: %s", h.command, src, h.dst, h.setpriv, err, out)
	}
	return nil
}

// upgradeRun is what repeat did: how many installs, over how long, the inodes they left
// at DST (the last one apart) and what went wrong.
type upgradeRun struct {
	count  int
	took   time.Duration
	inodes map[uint64]bool
	last   uint64
	errs   []error
}

// repeat installs the two builds in turn until stop is closed and minUpgrades have run,
// or one install fails; first is closed after the first one. After each install DST must
// be a new inode (the old one was replaced, not written over), hold exactly the build,
// have mode 0755, and no DST.tmp may be left.
func (h hookInstall) repeat(builds [2]hookBuild, stop <-chan struct{}, first chan<- struct{}) (r upgradeRun) {
	r.inodes = map[uint64]bool{}
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	prev := uint64(0)
	if st, err := os.Stat(h.dst); err == nil {
		prev = st.Sys().(*syscall.Stat_t).Ino
	}
	for ; ; r.count++ {
		if r.count >= minUpgrades {
			select {
			case <-stop:
				return r
			default:
			}
		}
		b := builds[r.count%2]
		if err := h.install(b.path); err != nil {
			r.errs = append(r.errs, fmt.Errorf("upgrade %d: %w", r.count+1, err))
			return r
		}
		st, err := os.Stat(h.dst)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("upgrade %d: %w", r.count+1, err))
			return r
		}
		ino := st.Sys().(*syscall.Stat_t).Ino
		sum, err := fileSum(h.dst)
		switch {
		case err != nil:
			r.errs = append(r.errs, fmt.Errorf("upgrade %d: %w", r.count+1, err))
		case ino == prev:
			r.errs = append(r.errs, fmt.Errorf("upgrade %d of %s kept inode %d: the file was written over, not replaced", r.count+1, h.dst, ino))
		case sum != b.sum:
			r.errs = append(r.errs, fmt.Errorf("upgrade %d left %s with sha256 %s, want %s's %s", r.count+1, h.dst, sum, b.path, b.sum))
		case st.Mode().Perm() != 0o755:
			r.errs = append(r.errs, fmt.Errorf("upgrade %d left %s with mode %v, want 0755", r.count+1, h.dst, st.Mode()))
		}
		if _, err := os.Lstat(h.dst + ".tmp"); err == nil {
			r.errs = append(r.errs, fmt.Errorf("upgrade %d left %s.tmp", r.count+1, h.dst))
		}
		if len(r.errs) > 0 {
			return r
		}
		r.inodes[ino], r.last, prev = true, ino, ino
		if r.count == 0 {
			close(first)
		}
	}
}

// hookBuild is a build of the hook library: its name, file and content's sha256.
type hookBuild struct {
	name, path, sum string
}

// buildHookLibraries makes two new builds of the hook library lib: copies with an added
// non-loaded ELF section (objcopy --add-section) whose text names the build, so that
// each loads as lib does while its bytes differ from lib's and from the other's.
func buildHookLibraries(t *testing.T, lib string) [2]hookBuild {
	t.Helper()
	dir := t.TempDir()
	orig, err := fileSum(lib)
	if err != nil {
		t.Fatal(err)
	}
	var builds [2]hookBuild
	for i, name := range []string{"a", "b"} {
		note := filepath.Join(dir, "build-"+name)
		text := "tessera e2e hook library upgrade, build " + name + "\n"
		if err := os.WriteFile(note, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "libvgpu-"+name+".so")
		if b, err := exec.Command("objcopy", "--add-section", ".tessera-e2e-build="+note, lib, out).CombinedOutput(); err != nil {
			t.Fatalf("objcopy (binutils, beside the C compiler that built libvgpu.so) on %s: %v: %s", lib, err, b)
		}
		f, err := elf.Open(out)
		if err != nil {
			t.Fatalf("build %s of the hook library: %v", name, err)
		}
		data, err := f.Section(".tessera-e2e-build").Data()
		f.Close()
		if err != nil || string(data) != text {
			t.Fatalf("build %s of the hook library: its section holds %q (%v), want %q", name, data, err, text)
		}
		sum, err := fileSum(out)
		if err != nil {
			t.Fatal(err)
		}
		builds[i] = hookBuild{name: name, path: out, sum: sum}
	}
	if builds[0].sum == orig || builds[1].sum == orig || builds[0].sum == builds[1].sum {
		t.Fatalf("the builds of the hook library are not distinct: %s, %s, the original %s", builds[0].sum, builds[1].sum, orig)
	}
	return builds
}

// mappedHook is the inode and content sha256 of the hook library a process maps, read
// through /proc/<pid>/map_files (the mapped file itself, even if replaced since). Every
// mapping of a file named like the library must be the library's path itself.
func mappedHook(pid int, lib string) (uint64, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, "", err
	}
	var ino uint64
	var span string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[5], filepath.Base(lib)) {
			continue
		}
		if f[5] != lib || len(f) > 7 || len(f) == 7 && f[6] != "(deleted)" {
			return 0, "", fmt.Errorf("maps %q, want the hook library %s itself", line, lib)
		}
		i, _ := strconv.ParseUint(f[4], 10, 64)
		if ino != 0 && i != ino {
			return 0, "", fmt.Errorf("maps two hook library inodes, %d and %d", ino, i)
		}
		if ino == 0 {
			from, to, _ := strings.Cut(f[0], "-")
			lo, err1 := strconv.ParseUint(from, 16, 64)
			hi, err2 := strconv.ParseUint(to, 16, 64)
			if err := errors.Join(err1, err2); err != nil {
				return 0, "", fmt.Errorf("maps %q: %w", line, err)
			}
			span = fmt.Sprintf("%x-%x", lo, hi)
		}
		ino = i
	}
	if ino == 0 {
		return 0, "", fmt.Errorf("the hook library %s is not in its memory map", lib)
	}
	sum, err := fileSum(fmt.Sprintf("/proc/%d/map_files/%s", pid, span))
	return ino, sum, err
}

// tmpFiles are the names of dir's entries that end in .tmp.
func tmpFiles(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var tmp []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// hookInode is the inode of the hook library in a process's memory map, 0 when not mapped.
func hookInode(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasPrefix(f[5], cl.HookLibrary()) {
			ino, _ := strconv.ParseUint(f[4], 10, 64)
			return ino
		}
	}
	return 0
}
