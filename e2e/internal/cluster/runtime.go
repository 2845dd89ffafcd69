package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// RuntimeContainerd is Node.Runtime for a node whose kubelet runs containers for real:
// kubelet v1.34 on containerd v2.2's CRI, runc v1.5 under containerd's runc shim, with
// tools/containerd/fakenvidiaruntime between the two in nvidia-container-runtime's place.
// The node is one mount and one PID namespace (kubelet-ns --node-init and --join): the
// kubelet's volume mounts are seen by containerd, and ending the namespace's init ends
// every shim and container of the node. Besides the in-memory node's directories it has:
//
//	containerd.sock    containerd's socket (containerd/config.toml, containerd/root)
//	cni/               the loopback-only CNI configuration and plugin
//	driver/            the stub driver and the card files the fake toolkit mounts
//	records/           written by fakenvidiaruntime: what runc got for each container
const RuntimeContainerd = "containerd"

// The images a real-runtime node has (no registry): the sandboxes' pause and the probe.
const (
	PauseImage = "tessera.local/pause:e2e"
	ProbeImage = "tessera.local/vgpu-probe:e2e"
)

// ProbePath is the probe's path in its image.
const ProbePath = "/usr/bin/vgpu-probe"

// startRuntime prepares a real-runtime node's directories, cgroups, images and hook
// library, starts its namespaces' init with containerd, and imports the images.
func (c *Cluster) startRuntime(ctx context.Context, n Node) error {
	rt := c.Opts.Bin.Runtime
	if rt.Missing != "" {
		return fmt.Errorf("node %s runs real containers, which were not built: %s", n.Name, rt.Missing)
	}
	dir := c.NodeDir(n.Name)
	for _, d := range []string{"containerd", "cni/bin", "cni/net.d", "driver"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	archive, err := c.runtimeImages()
	if err != nil {
		return err
	}
	// As the chart's init container puts the library on each node.
	copies := [][2]string{{rt.HookLibrary, c.HookLibrary()}, {rt.Pause, filepath.Join(dir, "cni", "bin", "tessera-loopback")},
		{filepath.Join(rt.StubDriver, "libcuda.so.1"), filepath.Join(dir, "driver", "libcuda.so.1")},
		{filepath.Join(rt.StubDriver, "libnvidia-ml.so.1"), filepath.Join(dir, "driver", "libnvidia-ml.so.1")}}
	for _, cp := range copies {
		if err := copyFile(cp[0], cp[1]); err != nil {
			return err
		}
	}
	conflist := `{"cniVersion":"1.0.0","name":"tessera-loopback","plugins":[{"type":"tessera-loopback"}]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "cni", "net.d", "10-tessera-loopback.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	snapshotter := snapshotterFor(dir)
	conf := filepath.Join(dir, "containerd", "config.toml")
	if err := os.WriteFile(conf, []byte(containerdConfig(dir, snapshotter, rt.NvidiaRuntime)), 0o644); err != nil {
		return err
	}
	if err := makeCgroups(c.cgroupRoot(n.Name)); err != nil {
		return err
	}
	sock := filepath.Join(dir, "containerd.sock")
	env := []string{"PATH=" + filepath.Dir(rt.Shim) + ":" + os.Getenv("PATH"), // containerd finds its shim on PATH
		"TESSERA_RUNC=" + rt.Runc, "TESSERA_CDI_DIR=" + c.CDIDir(n.Name), "TESSERA_RECORD_DIR=" + c.RecordDir(n.Name),
		"TESSERA_NODE=" + n.Name}
	p, err := startProcWith(procOptions{env: env, cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}, c.logDir,
		"containerd-"+n.Name, c.Opts.Bin.KubeletNS, "--node-init", "--device-plugins="+filepath.Join(dir, "device-plugins"),
		"--sysctl-dir="+filepath.Join(dir, "sysctl"), "--", rt.Containerd, "--config", conf)
	if err != nil {
		return err
	}
	c.add(p)
	c.mu.Lock()
	c.inits[n.Name] = p
	c.mu.Unlock()
	if err := waitFor(ctx, "containerd socket of "+n.Name, 30*time.Second, p, fileExists(sock)); err != nil {
		return err
	}
	imp := exec.CommandContext(ctx, rt.Ctr, "--address", sock, "--namespace", "k8s.io", "images", "import",
		"--snapshotter", snapshotter, archive)
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("import the images into %s: %w\n%s", n.Name, err, out)
	}
	return nil
}

// containerdConfig is a real-runtime node's containerd configuration: everything under
// the node's directory or the namespace's own /run (a tmpfs, where the shims' sockets
// live whatever the configuration says), the CRI with CDI on against the node's spec
// directory, no TCP streaming port, no NRI, a loopback-only CNI, and the OCI runtime
// fakenvidiaruntime (which executes runc, TESSERA_RUNC in containerd's environment).
// restrict_oom_score_adj: lowering a score (the kubelet asks -998 for sandboxes) needs
// CAP_SYS_RESOURCE, which root lacks on the project's machines. container_annotations:
// the agent's tessera.io/container reaches the OCI spec (and the record).
func containerdConfig(dir, snapshotter, ociRuntime string) string {
	return fmt.Sprintf(`version = 3
root = '%[1]s/containerd/root'
state = '/run/containerd'

[grpc]
  address = '%[1]s/containerd.sock'
[ttrpc]
  address = '%[1]s/containerd.sock.ttrpc'
[cgroup]
  path = ''

[plugins.'io.containerd.internal.v1.opt']
  path = '%[1]s/containerd/opt'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = '%[2]s'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '%[4]s'
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ['%[1]s/cdi']
  enable_criu = false
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      container_annotations = ['tessera.io/*']
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '%[3]s'
        Root = '/run/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['%[1]s/cni/bin']
    conf_dir = '%[1]s/cni/net.d'
    max_conf_num = 1
    use_internal_loopback = true
`, dir, snapshotter, ociRuntime, PauseImage)
}

// overlayfsMagic is statfs's f_type of an overlay file system.
const overlayfsMagic = 0x794c7630

// snapshotterFor picks containerd's overlayfs snapshotter, or native where the node's
// directory is itself on an overlay (a containerized CI machine), which overlayfs may not
// stack on.
func snapshotterFor(dir string) string {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil && fs.Type == overlayfsMagic {
		return "native"
	}
	return "overlayfs"
}

// runtimeImages writes the real-runtime nodes' image archive once per run: the pause
// image (the static pause program) and the probe's (the probe, the C library and the
// loader it and the hook library need, from this machine); and records where the C library
// went, where the fake toolkit mounts the stub driver.
func (c *Cluster) runtimeImages() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	archive := filepath.Join(c.Opts.RunDir, "images.tar")
	if c.imageLibDir != "" {
		return archive, nil
	}
	rt := c.Opts.Bin.Runtime
	pause, err := hostFile(rt.Pause, "/pause", 0o755)
	if err != nil {
		return "", err
	}
	probe, err := hostFile(rt.Probe, ProbePath, 0o755)
	if err != nil {
		return "", err
	}
	libs, libDir, err := sharedLibraries([]string{"libcuda.so.1", "libnvidia-ml.so.1"}, rt.Probe, rt.HookLibrary,
		filepath.Join(rt.StubDriver, "libcuda.so.1"), filepath.Join(rt.StubDriver, "libnvidia-ml.so.1"))
	if err != nil {
		return "", err
	}
	files := append([]imageFile{probe, {Path: "/etc/.keep", Mode: 0o644}}, libs...)
	if err := writeImageArchive(archive, []ociImage{{Name: PauseImage, Entrypoint: []string{"/pause"}, Files: []imageFile{pause}},
		{Name: ProbeImage, Entrypoint: []string{ProbePath, "run"}, Files: files}}); err != nil {
		return "", fmt.Errorf("the real-runtime images: %w", err)
	}
	c.imageLibDir = libDir
	return archive, nil
}

// cgroupRoot is the node's kubelet's cgroupRoot: /<run directory's name>/<node> in each
// hierarchy, so that every node's pods stay in cgroups of their own.
func (c *Cluster) cgroupRoot(node string) string {
	return "/" + filepath.Base(c.Opts.RunDir) + "/" + node
}

// cgroupHierarchies are the mounted cgroup hierarchies: /sys/fs/cgroup on cgroup v2, each
// v1 controller's directory (and a hybrid host's unified one) otherwise.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var out []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		h := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			out = append(out, h)
		}
	}
	return out
}

// makeCgroups creates the cgroup root in every hierarchy: the kubelet with cgroupsPerQOS
// wants it to exist. On cgroup v2 the controllers are enabled for the subtree (best effort:
// the kubelet says what it misses).
func makeCgroups(root string) error {
	for _, h := range cgroupHierarchies() {
		if err := os.MkdirAll(filepath.Join(h, root), 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", filepath.Join(h, root), err)
		}
		if h == "/sys/fs/cgroup" {
			for _, dir := range []string{filepath.Dir(root), root} {
				for _, ctl := range []string{"cpu", "cpuset", "memory", "pids", "io", "hugetlb"} {
					_ = os.WriteFile(filepath.Join(h, dir, "cgroup.subtree_control"), []byte("+"+ctl), 0o644)
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the cgroup root's tree from every hierarchy once its processes
// have gone (deepest first), and its parent when no other node is left in it.
func removeCgroups(ctx context.Context, root string) error {
	var left []string
	err := waitFor(ctx, "cgroups of "+root+" removed", 20*time.Second, nil, func(context.Context) (bool, error) {
		left = left[:0]
		for _, h := range cgroupHierarchies() {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
					left = append(left, dirs[i])
				}
			}
			_ = os.Remove(filepath.Join(h, filepath.Dir(root))) // fails while another node's is there
		}
		if len(left) > 0 {
			return false, fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return true, nil
	})
	return err
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
