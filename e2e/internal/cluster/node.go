package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// A simulated GPU node is three processes: our in-memory CRI (fakecri), a real kubelet
// in a private mount namespace (kubelet-ns) talking to it, and Tessera's node agent on a
// go-nvml fake machine as the kubelet's device plugin; a real-runtime node has containerd
// in fakecri's place (runtime.go). Its directory holds:
//
//	cri.sock           the CRI socket
//	device-plugins/    seen by the kubelet as /var/lib/kubelet/device-plugins: kubelet.sock,
//	                   the agent's socket, the device manager's checkpoint
//	kubelet/           the kubelet's --root-dir (pods/, pod-resources/kubelet.sock, pki/)
//	kubelet.yaml       its KubeletConfiguration
//	pod-resources.sock the harness's relay to the kubelet's PodResources socket, which
//	                   the agent asks (HoldPodResources)
//	pod-logs/          container logs (podLogsDir), created by the CRI
//	records/           what the kubelet passed to each container (one JSON per container)
//	faults/            files the fake agent turns into NVML events (InjectXID)
//	cdi/               CDI specs: the NVIDIA toolkit's (written by the fake agent for its
//	                   machine) and the agent's own; the CRI resolves CDI devices here
//	state/             the agent's state dir
//	sysctl/            the files standing in for the kernel tunables the kubelet sets
//	numa/              with Node.NUMANodes, the NUMA node list the kubelet sees

// NodeDir is the node's directory.
func (c *Cluster) NodeDir(node string) string { return filepath.Join(c.Opts.RunDir, "nodes", node) }

// RecordDir holds one CRI record (JSON) per container the node's kubelet created.
func (c *Cluster) RecordDir(node string) string { return filepath.Join(c.NodeDir(node), "records") }

// CDIDir is the node's CDI spec directory (its /var/run/cdi).
func (c *Cluster) CDIDir(node string) string { return filepath.Join(c.NodeDir(node), "cdi") }

// DeviceCheckpoint is the node's kubelet device manager checkpoint file.
func (c *Cluster) DeviceCheckpoint(node string) string {
	return filepath.Join(c.NodeDir(node), "device-plugins", "kubelet_internal_checkpoint")
}

func (c *Cluster) podResourcesSocket(node string) string {
	return filepath.Join(c.NodeDir(node), "kubelet", "pod-resources", "kubelet.sock")
}

func (c *Cluster) startNode(ctx context.Context, n Node) error {
	dir := c.NodeDir(n.Name)
	for _, d := range []string{"device-plugins", "kubelet", "pod-logs", "records", "state", "sysctl", "cdi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	switch n.Runtime {
	case RuntimeContainerd:
		if n.NUMANodes > 1 {
			return fmt.Errorf("node %s: a real-runtime node shows the host's NUMA nodes", n.Name)
		}
		if err := c.startRuntime(ctx, n); err != nil {
			return err
		}
	case "":
		sock := filepath.Join(dir, "cri.sock")
		cri, err := startProc(c.logDir, "cri-"+n.Name, c.Opts.Bin.CRI, "--socket="+sock,
			"--record-dir="+c.RecordDir(n.Name), "--node="+n.Name, "--cdi-spec-dir="+c.CDIDir(n.Name))
		if err != nil {
			return err
		}
		c.add(cri)
		if err := waitFor(ctx, "CRI socket of "+n.Name, 30*time.Second, cri, fileExists(sock)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("node %s: unknown runtime %q", n.Name, n.Runtime)
	}
	if err := c.writeKubeletConfig(n); err != nil {
		return err
	}
	if err := c.StartKubelet(ctx, n.Name); err != nil {
		return err
	}
	c.superviseKubelet(n.Name, c.nodeDone(n.Name))
	if err := c.startPodResourcesRelay(n.Name); err != nil {
		return err
	}
	// As a DaemonSet's pod, the agent starts once its Node exists: an agent that finds no
	// Node waits 30 s before it looks again (its check for another GPU plugin).
	if err := waitFor(ctx, "Node "+n.Name+" registered", 60*time.Second, nil, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return err
	}
	if err := c.StartAgent(ctx, n.Name); err != nil {
		return err
	}
	return c.WaitNodeReady(ctx, n.Name, 90*time.Second)
}

func fileExists(path string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	}
}

func (c *Cluster) node(name string) (Node, bool) {
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Nodes are the cluster's nodes now: Options.Nodes and those AddNode started.
func (c *Cluster) Nodes() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(append([]Node(nil), c.Opts.Nodes...), c.added...)
}

// nodeDone is closed when the node is removed or the cluster stops.
func (c *Cluster) nodeDone(name string) <-chan struct{} {
	removed := make(chan struct{})
	c.mu.Lock()
	c.nodeQuit[name] = removed
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		select {
		case <-removed:
		case <-c.quit:
		}
		close(done)
	}()
	return done
}

// writeKubeletConfig writes the node's KubeletConfiguration: no cgroups of its own (and so
// no in-place pod resize), no swap, iptables or kernel-default checks, anonymous access to
// its own API on free loopback ports, eviction and image GC that never trigger on a busy
// shared machine.
// The node status is computed every second and sent when it changes, so the device
// plugin's slots (and their health) reach the Node within a second, not at the next
// 10 s sync.
func (c *Cluster) writeKubeletConfig(n Node) error {
	name := n.Name
	port, err := freePort()
	if err != nil {
		return err
	}
	healthz, err := freePort()
	if err != nil {
		return err
	}
	dir := c.NodeDir(name)
	endpoint, cgroups := filepath.Join(dir, "cri.sock"), "cgroupsPerQOS: false\n"
	if n.Runtime == RuntimeContainerd {
		// Pod cgroups under a root of the node's own: without them containerd puts every
		// container at /k8s.io/<id>, shared by every node. The resolver file is the node's,
		// as /etc/resolv.conf may point into the host's /run, which the node does not see.
		endpoint = filepath.Join(dir, "containerd.sock")
		resolv := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
			return err
		}
		cgroups = fmt.Sprintf("cgroupsPerQOS: true\ncgroupRoot: %s\nresolvConf: %s\n", c.cgroupRoot(name), resolv)
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
cgroupDriver: cgroupfs
%senforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
serializeImagePulls: false
# No registry behind the fake runtime: a pull is instant, so no pull rate limit (the
# default, 5/s with a burst of 10, fails bursts of pods with "pull QPS exceeded").
registryPullQPS: 0
evictionHard: {memory.available: 1Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 5m
# Without pod cgroups (cgroupsPerQOS: false) no in-place resize can be made, and v1.34.2's
# attempt at one panics: a sync that finds no actuated-resources record for a running
# container (its pod was force-deleted while the sync waited for the next relist) resizes
# it to its requests, and doPodResizeAction dereferences the pod cgroup configuration,
# which the no-op pod container manager returns as nil (TestFaultForceDeleteWhilePodsStart).
featureGates:
  InPlacePodVerticalScaling: false
%s`, port, healthz, endpoint, filepath.Join(dir, "pod-logs"), cgroups, c.kubeletGates()) + n.KubeletConfig
	return os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(conf), 0o644)
}

// StartKubelet starts (or restarts) the node's kubelet and waits for its device plugin
// registration socket.
func (c *Cluster) StartKubelet(ctx context.Context, name string) error {
	p, sock, err := c.spawnKubelet(name, nil)
	if err != nil {
		return err
	}
	return waitFor(ctx, "kubelet.sock of "+name, 60*time.Second, p, fileExists(sock))
}

// spawnKubelet starts the node's kubelet process and makes it the node's kubelet. With
// prev (a supervisor's restart) it starts one only while prev is still the node's kubelet
// and the cluster is not stopping, and returns errSuperseded otherwise, so that a restart
// never races a scenario's StartKubelet or Stop.
func (c *Cluster) spawnKubelet(name string, prev *proc) (*proc, string, error) {
	n, ok := c.node(name)
	if !ok {
		return nil, "", fmt.Errorf("no node %q", name)
	}
	c.kubeletStart.Lock()
	defer c.kubeletStart.Unlock()
	if prev != nil {
		if c.kubelet(name) != prev || c.stopping() {
			return nil, "", errSuperseded
		}
	}
	dir := c.NodeDir(name)
	var labels []string
	for k, v := range n.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	sock := filepath.Join(dir, "device-plugins", "kubelet.sock")
	// A restarted kubelet recreates it; waiting for the old one would return at once.
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return nil, "", err
	}
	ns := []string{"--device-plugins=" + filepath.Join(dir, "device-plugins"), "--sysctl-dir=" + filepath.Join(dir, "sysctl")}
	if n.NUMANodes > 1 {
		ns = append(ns, fmt.Sprintf("--numa-nodes=%d", n.NUMANodes), "--numa-dir="+filepath.Join(dir, "numa"))
	}
	if n.Runtime == RuntimeContainerd {
		// Into the namespaces of the node's init, where containerd runs (runtime.go).
		c.mu.Lock()
		init := c.inits[name]
		c.mu.Unlock()
		if init == nil {
			return nil, "", fmt.Errorf("node %s: its runtime is not running", name)
		}
		ns = []string{"--join=" + strconv.Itoa(init.cmd.Process.Pid)}
	}
	p, err := startProc(c.logDir, "kubelet-"+name, c.Opts.Bin.KubeletNS, append(ns, "--",
		c.Opts.Bin.Kubelet, "--config="+filepath.Join(dir, "kubelet.yaml"), "--kubeconfig="+c.Kubeconfig,
		"--root-dir="+filepath.Join(dir, "kubelet"), "--hostname-override="+name, "--node-labels="+strings.Join(labels, ","))...)
	if err != nil {
		return nil, "", err
	}
	c.add(p)
	c.mu.Lock()
	c.kubelets[name] = p
	c.mu.Unlock()
	return p, sock, nil
}

// superviseKubelet restarts the node's kubelet whenever it exits without the harness
// stopping it (KillKubelet, Stop), as the node's systemd would (kubeletRestart), and logs
// each such exit with the end of the kubelet's log (KubeletExits). It runs until quit.
func (c *Cluster) superviseKubelet(name string, quit <-chan struct{}) {
	s := &supervisor{what: "kubelet", node: name, policy: kubeletRestart, quit: quit,
		current: func() *proc { return c.kubelet(name) },
		restart: func(prev *proc) (*proc, error) {
			p, _, err := c.spawnKubelet(name, prev)
			return p, err
		},
		exited: func(e Exit) {
			c.mu.Lock()
			c.kubeletExits = append(c.kubeletExits, e)
			c.mu.Unlock()
		}}
	go s.run()
}

// KubeletExits lists every time a kubelet exited without the harness stopping it (and was
// restarted), oldest first.
func (c *Cluster) KubeletExits() []Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Exit(nil), c.kubeletExits...)
}

// KillKubelet ends the node's kubelet at once, as a crash does; its containers stay in
// the CRI, as they stay in a container runtime (on a real-runtime node they keep running
// under containerd). The harness asked for it: the kubelet's supervisor leaves it down
// until StartKubelet.
func (c *Cluster) KillKubelet(name string) {
	if p := c.kubelet(name); p != nil {
		p.kill()
	}
	// On a real-runtime node the harness's process is kubelet-ns, whose child (the kubelet,
	// in the node's PID namespace) dies with it through PR_SET_PDEATHSIG, a moment later: a
	// kubelet started at once would find the port still taken and exit.
	c.waitKubeletPortFree(name, 10*time.Second)
}

// waitKubeletPortFree waits until nothing listens on the node's kubelet port (read from
// its kubelet.yaml) or until timeout.
func (c *Cluster) waitKubeletPortFree(name string, timeout time.Duration) {
	b, err := os.ReadFile(filepath.Join(c.NodeDir(name), "kubelet.yaml"))
	if err != nil {
		return
	}
	var port string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "port: "); ok {
			port = strings.TrimSpace(v)
		}
	}
	if port == "" {
		return
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err == nil {
			l.Close()
			return
		}
	}
	klog.InfoS("The killed kubelet's port is still taken; starting the next one anyway", "node", name, "port", port)
}

// kubelet is the node's current kubelet process, nil before the first start.
func (c *Cluster) kubelet(name string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubelets[name]
}

// kubeletPodsDir is the node's kubelet pods directory as the agent, on the host, can read
// the pods' volumes in it. A real-runtime node's kubelet mounts each memory-backed volume
// (the pods' region volumes) in the node's own mount namespace, so the agent reads it
// through the node init's root, as an agent in a pod with a HostToContainer mount sees the
// host's.
func (c *Cluster) kubeletPodsDir(name string) string {
	dir := filepath.Join(c.NodeDir(name), "kubelet", "pods")
	c.mu.Lock()
	init := c.inits[name]
	c.mu.Unlock()
	if init == nil {
		return dir
	}
	return filepath.Join("/proc", strconv.Itoa(init.cmd.Process.Pid), "root") + dir
}

// StartAgent starts (or restarts) the node's device plugin, with extra flags after the
// cluster's and the node's.
func (c *Cluster) StartAgent(ctx context.Context, name string, extra ...string) error {
	n, ok := c.node(name)
	if !ok {
		return fmt.Errorf("no node %q", name)
	}
	dir := c.NodeDir(name)
	mp, err := freePort()
	if err != nil {
		return err
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", mp)
	kubeconfig, err := c.agentKubeconfig(ctx, name)
	if err != nil {
		return err
	}
	args := append([]string{"--machine=" + n.Machine, "--node-name=" + name, "--kubeconfig=" + kubeconfig,
		"--device-plugin-dir=" + filepath.Join(dir, "device-plugins"),
		"--pod-resources-socket=" + c.podResourcesRelay(name),
		"--state-dir=" + c.StateDir(name), "--metrics-address=" + metrics,
		"--hook-library=" + c.HookLibrary(), "--cdi-spec-dir=" + c.CDIDir(name), "--toolkit-cdi-dir=" + c.CDIDir(name),
		"--assignment-keys=" + AssignmentKeys, "--kubelet-pods-dir=" + c.kubeletPodsDir(name)}, c.Opts.AgentArgs...)
	if c.Opts.ChartDir != "" {
		// As the chart runs them (metrics.authentication): /metrics only for a token whose
		// user may get it, checked with the agent account's own TokenReview and
		// SubjectAccessReview permissions.
		args = append(args, "--metrics-auth=kubernetes")
	}
	args = append(append(args, n.AgentArgs...), extra...)
	c.mu.Lock()
	if c.agentConfig != "" {
		// The file first; the flags above win over it (flag > env > file).
		args = append([]string{"--config=" + c.agentConfig}, args...)
	}
	c.mu.Unlock()
	if n.Machine != "dgxa100" { // go-nvml's DGX A100 mock sends no events
		args = append(args, "--fault-dir="+filepath.Join(dir, "faults"))
	}
	if n.CardAPI == CardAPIDRA {
		args = append(args, c.draAgentArgs(name)...)
	}
	if n.Runtime == RuntimeContainerd {
		// Cards a real process can use through the stub driver (toolkit.go in the fake agent).
		c.mu.Lock()
		libDir := c.imageLibDir
		c.mu.Unlock()
		args = append(args, "--driver-uuids", "--toolkit-driver-dir="+filepath.Join(dir, "driver"), "--toolkit-lib-dir="+libDir)
	}
	p, err := startProc(c.logDir, "agent-"+name, c.Opts.Bin.Agent, args...)
	if err != nil {
		return err
	}
	c.add(p)
	c.mu.Lock()
	c.agents[name] = p
	if c.agentMetrics == nil {
		c.agentMetrics = map[string]string{}
	}
	c.agentMetrics[name] = "http://" + metrics + "/metrics"
	c.mu.Unlock()
	return nil
}

// InjectXID makes card index of the node's fake machine report the XID as a critical
// NVML event (not on dgxa100 nodes).
func (c *Cluster) InjectXID(node string, index int, xid uint64) error {
	n, ok := c.node(node)
	if !ok || n.Machine == "dgxa100" {
		return fmt.Errorf("node %q cannot inject faults", node)
	}
	dir := filepath.Join(c.NodeDir(node), "faults")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.FormatUint(xid, 10)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("xid-%d", index)))
}

// ListProcesses makes NVML on the node list these processes (pid to bytes of device memory)
// on card index, as the driver would; an empty map lists none.
func (c *Cluster) ListProcesses(node string, index int, procs map[int]uint64) error {
	n, ok := c.node(node)
	if !ok || n.Machine == "dgxa100" {
		return fmt.Errorf("node %q cannot list fake processes", node)
	}
	dir := filepath.Join(c.NodeDir(node), "faults")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, fmt.Sprintf("processes-%d", index))
	if len(procs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	var b strings.Builder
	for pid, used := range procs {
		fmt.Fprintf(&b, "%d %d\n", pid, used)
	}
	tmp := filepath.Join(dir, ".processes.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// HookLibrary is the hook library path every agent hands to its containers.
func (c *Cluster) HookLibrary() string { return filepath.Join(c.Opts.RunDir, "libvgpu.so") }

// KillAgent ends the node's device plugin at once, as a crash does.
func (c *Cluster) KillAgent(name string) {
	c.mu.Lock()
	p := c.agents[name]
	c.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// WaitNodeReady waits until the Node is Ready, untainted (kube-controller-manager's node
// lifecycle controller removes the not-ready taint), advertises slots and carries the
// agent's inventory.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	if n, ok := c.node(name); ok && n.CardAPI == CardAPIDRA {
		return c.waitDRANodeReady(ctx, name, timeout)
	}
	return waitFor(ctx, "node "+name+" ready", timeout, nil, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := n.Status.Allocatable[corev1.ResourceName(api.ResourceNumber)]
		if !ready(n) || q.Value() == 0 || n.Annotations[api.AnnotationInventory] == "" || len(n.Spec.Taints) > 0 {
			return false, fmt.Errorf("ready %t, slots %d, inventory %t, taints %v", ready(n), q.Value(),
				n.Annotations[api.AnnotationInventory] != "", n.Spec.Taints)
		}
		return true, nil
	})
}

func ready(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
