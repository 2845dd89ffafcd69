package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"
)

// Node is one simulated GPU node.
type Node struct {
	Name string
	// Machine is the fake-gpu-agent shape: dgxa100, a30x4, l40sxN, h100migx2 (MIG mode).
	Machine string
	Labels  map[string]string
	// AgentArgs are extra vgpu-device-plugin flags for this node, after Options.AgentArgs.
	AgentArgs []string
	// KubeletConfig is appended to the node's KubeletConfiguration (YAML fields, e.g.
	// "topologyManagerPolicy: single-numa-node").
	KubeletConfig string
	// NUMANodes, when above 1, is how many NUMA nodes the kubelet sees: they split this
	// machine's CPUs and memory (kubelet-ns --numa-nodes).
	NUMANodes int
	// Runtime is "" for the in-memory runtime (fakecri), RuntimeContainerd for real
	// containers (runtime.go).
	Runtime string
	// CardAPI is the agent's cardAPI: "" or "device-plugin" for vGPU slots, CardAPIDRA for
	// the DRA driver (dra.go).
	CardAPI string
}

// Options configure a cluster.
type Options struct {
	Bin    *Binaries
	RunDir string
	Nodes  []Node
	// SchedulerConf is the volcano-scheduler.conf to run with.
	SchedulerConf string
	// ControllerArgs are extra vc-controller-manager flags (e.g. its API client's QPS).
	ControllerArgs []string
	// SchedulerArgs are extra vc-scheduler flags (e.g. --enable-pprof).
	SchedulerArgs []string
	// SchedulerCgroup, when set, holds every scheduler the cluster starts (a memory limit,
	// as the chart's scheduler.resources.limits.memory sets one).
	SchedulerCgroup *MemoryCgroup
	// AgentArgs are extra vgpu-device-plugin flags for every node (e.g. --heartbeat-interval=5s).
	AgentArgs []string
	// FeatureGates are Kubernetes feature gates set alike on the API server,
	// kube-controller-manager, every kubelet and vc-scheduler (e.g. the DRA alpha gates).
	FeatureGates map[string]bool
	// ChartDir, when set, is the chart whose service accounts and RBAC the scheduler and
	// the agents run under (identity.go); empty: they act as the admin (HarnessUser).
	ChartDir string
	Progress io.Writer
}

// Cluster is a running local cluster.
type Cluster struct {
	Opts       Options
	Kubeconfig string
	Rest       *rest.Config
	Client     kubernetes.Interface
	Volcano    vcclient.Interface

	mu       sync.Mutex
	procs    []*proc
	agents   map[string]*proc
	kubelets map[string]*proc
	// kubeletStart serializes starting kubelets (spawnKubelet) with Stop; kubeletExits are
	// the exits their supervisors saw (node.go).
	kubeletStart sync.Mutex
	kubeletExits []Exit
	// quit is closed by Stop: supervisors end.
	quit     chan struct{}
	quitOnce sync.Once
	sched    *proc
	// Where the scheduler and each node agent serve /metrics, and when the scheduler
	// was started (aux.go).
	schedMetrics string
	// schedGuarded is the scheduler's /metrics behind Kubernetes authentication and
	// authorization (--tessera-metrics-auth-address), as the chart serves it.
	schedGuarded string
	schedStart   time.Time
	agentMetrics map[string]string
	api          *proc
	logDir       string
	// The scheduler's way to the API server (apiproxy.go) and what ends it.
	schedKubeconfig string
	binds           *bindGate
	closers         []func()
	// Each node agent's way to its kubelet's PodResources socket (podresgate.go).
	gates map[string]*socketGate
	// What a rollout (rollout.go) put in place of Opts.SchedulerConf, and the config file
	// the agents read under the harness's flags; "" for none.
	schedConf, agentConfig string
	// The image whose root file system the scheduler runs from (image.go); nil: Bin.Scheduler.
	schedImage *Image
	// The nodes started after Start (AddNode), what ends each node's kubelet supervisor,
	// each real-runtime node's init (runtime.go), and where the probe image keeps its C
	// library (the fake toolkit mounts the stub driver there).
	added       []Node
	nodeQuit    map[string]chan struct{}
	inits       map[string]*proc
	imageLibDir string
}

// Start brings the cluster up. On error everything already started is stopped.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	c := &Cluster{Opts: o, logDir: filepath.Join(o.RunDir, "logs"), agents: map[string]*proc{}, kubelets: map[string]*proc{},
		gates: map[string]*socketGate{}, quit: make(chan struct{}), nodeQuit: map[string]chan struct{}{}, inits: map[string]*proc{}}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	step := func(name string, f func() error) error {
		start := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w (logs in %s)", name, err, c.logDir)
		}
		fmt.Fprintf(o.Progress, "  %-24s up in %s\n", name, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	var etcdURL string
	if err := step("etcd", func() (err error) { etcdURL, err = c.startEtcd(ctx); return err }); err != nil {
		return nil, err
	}
	if err := step("kube-apiserver", func() error { return c.startAPIServer(ctx, etcdURL) }); err != nil {
		return nil, err
	}
	if err := step("volcano CRDs", func() error { return c.installCRDs(ctx) }); err != nil {
		return nil, err
	}
	if err := step("kube-controller-manager", func() error { return c.startKubeControllerManager(ctx) }); err != nil {
		return nil, err
	}
	if o.ChartDir != "" {
		if err := step("the chart's accounts", func() error { return c.applyIdentities(ctx) }); err != nil {
			return nil, err
		}
	}
	if err := step("vc-webhook-manager", func() error { return c.startWebhook(ctx) }); err != nil {
		return nil, err
	}
	if err := step("vc-controller-manager", func() error { return c.startControllers(ctx) }); err != nil {
		return nil, err
	}
	if err := step("vc-scheduler (Tessera)", func() error { return c.StartScheduler(ctx) }); err != nil {
		return nil, err
	}
	for _, n := range o.Nodes {
		n := n
		if err := step("node "+n.Name+" ("+n.Machine+")", func() error { return c.startNode(ctx, n) }); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// errNotRoot says why the harness needs root, as a kubelet does.
var errNotRoot = errors.New("the simulated GPU nodes run real kubelets, which need root: each runs in a private " +
	"mount namespace with bind mounts over /var/lib/kubelet/device-plugins and the kernel tunables it sets " +
	"(nothing on the host changes); run as root, e.g. sudo make e2e")

// CheckRoot says why the harness cannot run when the process is not root; callers run it
// before building anything.
func CheckRoot() error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	return nil
}

// Stop ends every process, newest first, and the kubelets' supervisors before them.
func (c *Cluster) Stop() {
	c.quitOnce.Do(func() {
		if c.quit != nil {
			close(c.quit)
		}
	})
	// A supervisor's restart under way finishes first (its kubelet is in procs) or sees
	// quit and starts nothing.
	c.kubeletStart.Lock()
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	closers := c.closers
	c.closers = nil
	c.mu.Unlock()
	c.kubeletStart.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(5 * time.Second)
	}
	for _, f := range closers {
		f()
	}
	c.mu.Lock()
	added := append([]Node(nil), c.added...)
	c.mu.Unlock()
	for _, n := range added {
		if n.Runtime == RuntimeContainerd {
			if err := removeCgroups(context.Background(), c.cgroupRoot(n.Name)); err != nil {
				klog.ErrorS(err, "Cgroups of a real-runtime node left behind", "node", n.Name)
			}
		}
	}
}

// stopping reports whether Stop has begun.
func (c *Cluster) stopping() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

// LogDir is where every component logs.
func (c *Cluster) LogDir() string { return c.logDir }

func (c *Cluster) add(p *proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
}

func (c *Cluster) startEtcd(ctx context.Context) (string, error) {
	client, err := freePort()
	if err != nil {
		return "", err
	}
	peer, err := freePort()
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", client)
	purl := fmt.Sprintf("http://127.0.0.1:%d", peer)
	p, err := startProc(c.logDir, "etcd", c.Opts.Bin.Etcd, "--data-dir", filepath.Join(c.Opts.RunDir, "etcd"),
		"--name", "e2e", "--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl, "--initial-cluster", "e2e="+purl,
		"--unsafe-no-fsync")
	if err != nil {
		return "", err
	}
	c.add(p)
	return url, waitFor(ctx, "etcd health", 30*time.Second, p, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, etcdURL string) error {
	dir := filepath.Join(c.Opts.RunDir, "apiserver")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeServiceAccountKeys(dir); err != nil {
		return err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	args := append([]string{"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"), "--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16", "--enable-admission-plugins=NamespaceLifecycle",
		"--disable-admission-plugins=ServiceAccount", "--enable-priority-and-fairness=false"}, c.apiServerGateArgs()...)
	p, err := startProc(c.logDir, "kube-apiserver", c.Opts.Bin.APIServer, args...)
	if err != nil {
		return err
	}
	c.add(p)
	c.mu.Lock()
	c.api = p
	c.mu.Unlock()
	c.Kubeconfig = filepath.Join(c.Opts.RunDir, "kubeconfig")
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tessera-e2e"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["tessera-e2e"] = &clientcmdapi.Context{Cluster: "tessera-e2e", AuthInfo: "admin"}
	kc.CurrentContext = "tessera-e2e"
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return err
	}
	c.Rest = &rest.Config{Host: server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400,
		WarningHandler: rest.NoWarnings{}}
	if c.Client, err = kubernetes.NewForConfig(c.Rest); err != nil {
		return err
	}
	if c.Volcano, err = vcclient.NewForConfig(c.Rest); err != nil {
		return err
	}
	return waitFor(ctx, "kube-apiserver /readyz", 90*time.Second, p, func(ctx context.Context) (bool, error) {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	})
}

func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// installCRDs creates Volcano's CRDs from its module and waits until they are served.
func (c *Cluster) installCRDs(ctx context.Context) error {
	files := c.Opts.Bin.CRDs
	ext, err := apiextclient.NewForConfig(c.Rest)
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, n := range names {
		n := n
		if err := waitFor(ctx, "CRD "+n, 30*time.Second, nil, func(ctx context.Context) (bool, error) {
			crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startControllers(ctx context.Context) error {
	hp, err := freePort()
	if err != nil {
		return err
	}
	p, err := startProc(c.logDir, "vc-controller-manager", c.Opts.Bin.VolcanoControllers, append([]string{
		"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--enable-healthz", fmt.Sprintf("--healthz-address=127.0.0.1:%d", hp)},
		c.Opts.ControllerArgs...)...)
	if err != nil {
		return err
	}
	c.add(p)
	return waitFor(ctx, "vc-controller-manager healthz", 60*time.Second, p, healthz(hp))
}

func healthz(port int) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}
}

// StartScheduler starts Tessera's vc-scheduler (with the conf of the last rollout, else
// Opts.SchedulerConf), talking to the API server through the
// harness's proxy (apiproxy.go), and waits until it has created the default queue and
// answers its health check.
func (c *Cluster) StartScheduler(ctx context.Context) error {
	if c.schedKubeconfig == "" {
		if err := c.startAPIProxy(); err != nil {
			return fmt.Errorf("scheduler's API proxy: %w", err)
		}
	}
	lp, err := freePort()
	if err != nil {
		return err
	}
	hp, err := freePort()
	if err != nil {
		return err
	}
	gp, err := freePort()
	if err != nil {
		return err
	}
	start := time.Now()
	conf := c.Opts.SchedulerConf
	c.mu.Lock()
	if c.schedConf != "" {
		conf = c.schedConf
	}
	c.mu.Unlock()
	prog, args, kubeconfig, conf, err := c.schedulerCommand(conf)
	if err != nil {
		return err
	}
	args = append(args, "--kubeconfig="+kubeconfig, "--scheduler-conf="+conf, "--leader-elect=false", "--enable-healthz", "--enable-metrics",
		fmt.Sprintf("--listen-address=127.0.0.1:%d", lp), fmt.Sprintf("--healthz-address=127.0.0.1:%d", hp),
		// The guarded endpoint the chart exposes (metrics.authentication); the harness itself
		// reads the loopback one.
		fmt.Sprintf("--tessera-metrics-auth-address=127.0.0.1:%d", gp))
	// Every assignment is signed and every agent verifies, as the chart runs them.
	args = append(args, "--tessera-signing-secret="+SigningSecret, "--tessera-signing-keys-configmap="+AssignmentKeys)
	if g := c.featureGatesFlag(); g != "" {
		args = append(args, g)
	}
	args = append(args, c.Opts.SchedulerArgs...)
	p, err := startProc(c.logDir, "vc-scheduler", prog, args...)
	if err != nil {
		return err
	}
	c.add(p)
	if cg := c.Opts.SchedulerCgroup; cg != nil {
		if err := cg.Add(p.cmd.Process.Pid); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.sched, c.schedStart = p, start
	c.schedMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", lp)
	c.schedGuarded = fmt.Sprintf("http://127.0.0.1:%d/metrics", gp)
	c.mu.Unlock()
	if err := waitFor(ctx, "vc-scheduler healthz", 60*time.Second, p, healthz(hp)); err != nil {
		return err
	}
	return waitFor(ctx, "default queue", 60*time.Second, p, func(ctx context.Context) (bool, error) {
		_, err := c.Volcano.SchedulingV1beta1().Queues().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// SchedulerMetricsURL is where the scheduler serves its Prometheus metrics (Volcano's
// and the vgpu plugin's).
func (c *Cluster) SchedulerMetricsURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.schedMetrics
}

// SchedulerGuardedMetricsURL is the scheduler's /metrics behind Kubernetes
// authentication and authorization, as the chart serves it to Prometheus.
func (c *Cluster) SchedulerGuardedMetricsURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.schedGuarded
}

// AgentMetricsURL is where the node's agent serves its Prometheus metrics.
func (c *Cluster) AgentMetricsURL(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agentMetrics[node]
}

// PauseAPIServer leaves kube-apiserver unresponsive for d: every client's requests
// and watches hang, as when it is unreachable, then it answers again.
func (c *Cluster) PauseAPIServer(d time.Duration) {
	c.mu.Lock()
	p := c.api
	c.mu.Unlock()
	p.pause(d)
}

// KillScheduler ends the scheduler at once, as a crash does.
func (c *Cluster) KillScheduler() {
	c.mu.Lock()
	p := c.sched
	c.mu.Unlock()
	p.kill()
}
