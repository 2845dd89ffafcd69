// Package suite holds the end-to-end scenarios. TestMain builds (or reuses) the binaries,
// brings up one local cluster with five simulated GPU nodes, and runs every scenario
// against it in turn; each scenario uses its own namespace and deletes its jobs after.
package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
)

var cl *cluster.Cluster

// chartDir is the chart in this tree: its service accounts, RBAC and admission policies are
// what the harness's scheduler and agents run under.
var chartDir = func() string {
	d, err := filepath.Abs(filepath.Join("..", "..", "charts", "tessera"))
	if err != nil {
		panic(err)
	}
	return d
}()

// nodes: 2x DGX A100 (8x A100 40 GB), 4x A30 24 GB on two NUMA nodes, 4x L40S 45 GB.
// gpu-c's kubelet sees two NUMA nodes and runs the Topology Manager with single-numa-node
// (topology_test.go);
// gpu-d's agent hands cards over as CDI devices (cdi_test.go), the others by environment;
// gpu-e's 2x H100 are in MIG mode, split into instances (mig_test.go).
var nodes = []cluster.Node{
	{Name: "gpu-a", Machine: "dgxa100"},
	{Name: "gpu-b", Machine: "dgxa100"},
	{Name: "gpu-c", Machine: "a30x4", NUMANodes: 2, KubeletConfig: "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n"},
	{Name: "gpu-d", Machine: "l40sx4", AgentArgs: []string{"--card-handoff=cdi"}},
	{Name: "gpu-e", Machine: "h100migx2"},
}

// heartbeatTimeout replaces the shipped 90s so that the stale-agent scenario is short.
const heartbeatTimeout = "15s"

// recoverAfter is the agents' --health-recover-after: how long after its last injected
// XID a card stays unhealthy.
const recoverAfter = 20 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	if err := cluster.CheckRoot(); err != nil {
		fmt.Println(err)
		return 1
	}
	e2eDir, _ := filepath.Abs("..")
	root := filepath.Dir(e2eDir)
	cache := os.Getenv("TESSERA_E2E_CACHE")
	if cache == "" {
		cache = filepath.Join(e2eDir, ".cache", "bin")
	}
	fmt.Println("== building")
	bin, err := cluster.Build(ctx, root, e2eDir, cache, os.Stdout)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	// Earlier runs' directories are kept for their logs, up to a point (cluster.PruneRunDirs).
	removed, err := cluster.PruneRunDirs(os.TempDir(), "tessera-e2e-", 5)
	if len(removed) > 0 {
		fmt.Printf("removed %d earlier runs' directories (the 5 newest are kept)\n", len(removed))
	}
	if err == nil {
		err = cluster.CheckFreeDisk(os.TempDir(), cluster.MinFreeDisk)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	runDir, err := os.MkdirTemp("", "tessera-e2e-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	conf, err := os.ReadFile(filepath.Join(root, "config", "volcano-scheduler.conf"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	confPath := filepath.Join(runDir, "volcano-scheduler.conf")
	edited := strings.Replace(string(conf), "vgpu.HeartbeatTimeout: 90s", "vgpu.HeartbeatTimeout: "+heartbeatTimeout, 1)
	if err := os.WriteFile(confPath, []byte(edited), 0o644); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("== starting cluster in", runDir)
	cl, err = cluster.Start(ctx, cluster.Options{Bin: bin, RunDir: runDir, Nodes: nodes, SchedulerConf: confPath,
		AgentArgs: []string{"--heartbeat-interval=3s", "--gc-interval=5s",
			// A card broken by an injected XID is checked every 2 s and healthy again 20 s
			// after its last fatal event, within its scenario.
			"--health-check-interval=2s", "--health-recover-after=" + recoverAfter.String()},
		// The scheduler and the agents run under the chart's own service accounts and RBAC.
		ChartDir: chartDir, Progress: os.Stdout,
		// The alpha gates of Tessera's DRA path, on the whole control plane and every kubelet
		// (dra_test.go); device-plugin nodes do not depend on them.
		FeatureGates: cluster.DRAGates()})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer cl.Stop()
	fmt.Println("== scenarios (logs in", cl.LogDir()+")")
	rc := m.Run()
	for _, n := range nodes {
		fmt.Printf("kubelet %s: %d MiB resident\n", n.Name, cl.KubeletRSS()[n.Name]>>20)
	}
	return rc
}

// ns creates a fresh namespace for a scenario.
func ns(t *testing.T, name string) string {
	t.Helper()
	_, err := cl.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// queue creates an open queue with the weight.
func queue(t *testing.T, name string, weight int32) {
	t.Helper()
	q := &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedulingv1beta1.QueueSpec{Weight: weight, Reclaimable: ptr(true)}}
	if _, err := cl.Volcano.SchedulingV1beta1().Queues().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		q, err := cl.Volcano.SchedulingV1beta1().Queues().Get(ctx, name, metav1.GetOptions{})
		return err == nil && q.Status.State == schedulingv1beta1.QueueStateOpen, nil
	})
	if err != nil {
		t.Fatalf("queue %s not open: %v", name, err)
	}
}

func submit(t *testing.T, jobs ...*batchv1alpha1.Job) {
	t.Helper()
	for _, j := range jobs {
		if _, err := cl.Volcano.BatchV1alpha1().Jobs(j.Namespace).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
			t.Fatalf("submit %s: %v", j.Name, err)
		}
	}
}

// cleanup checks the handoffs of the namespace's running vGPU pods, deletes its jobs,
// waits until kube-controller-manager's garbage collector has removed their pods and
// PodGroups (so the next scenario starts with free cards) and deletes the namespace.
func cleanup(t *testing.T, namespace string) {
	t.Helper()
	checkRunningHandoffs(t, namespace)
	ctx := context.Background()
	_ = cl.Volcano.BatchV1alpha1().Jobs(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err := waitCollected(ctx, namespace, 2*time.Minute); err != nil {
		t.Errorf("namespace %s: %v", namespace, err)
	}
	_ = cl.Client.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{})
}

// waitCollected waits until the namespace holds no jobs, pods or PodGroups.
func waitCollected(ctx context.Context, namespace string, timeout time.Duration) error {
	var left string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		jobs, err := cl.Volcano.BatchV1alpha1().Jobs(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods, err := cl.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pgs, err := cl.Volcano.SchedulingV1beta1().PodGroups(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = fmt.Sprintf("%d jobs, %s, %d PodGroups left", len(jobs.Items), workload.Summary(pods.Items), len(pgs.Items))
		return len(jobs.Items)+len(pods.Items)+len(pgs.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("not garbage-collected: %s: %w", left, err)
	}
	return nil
}

// noOvercommit fails the test for any card holding more than it has, by the pods'
// assignments and by what the kubelets handed to the live containers.
func noOvercommit(t *testing.T) map[string]*workload.CardUse {
	t.Helper()
	l, pods, err := workload.Ledger(context.Background(), cl.Client)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range workload.Overcommitted(l) {
		t.Errorf("over-committed: %s", b)
	}
	for _, b := range workload.CRIOvercommitted(l, pods, handed(t)) {
		t.Errorf("over-committed in the CRI records: %s", b)
	}
	return l
}

// handed reads what every node's kubelet handed to its containers (a real-runtime node
// added by its scenario included).
func handed(t *testing.T) *workload.Handed {
	t.Helper()
	var dirs, checkpoints []string
	for _, n := range cl.Nodes() {
		dirs = append(dirs, cl.RecordDir(n.Name))
		checkpoints = append(checkpoints, cl.DeviceCheckpoint(n.Name))
	}
	h, err := workload.ReadHanded(dirs, checkpoints, api.ResourceNumber, cl.HookLibrary())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkHandoff compares what every running pod's containers received from the kubelet
// with its assignment.
func checkHandoff(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	h := handed(t)
	for _, p := range pods {
		for _, b := range workload.CheckHandoff(p, h) {
			t.Error(b)
		}
	}
}

// checkRunningHandoffs checks the handoff of every running vGPU pod of the namespace and
// that no card is over-committed; cleanup runs it, so every scenario ends with it.
func checkRunningHandoffs(t *testing.T, namespace string) {
	t.Helper()
	pods, err := cl.Client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && requestsCards(p) {
			running = append(running, p)
		}
	}
	checkHandoff(t, running)
	noOvercommit(t)
}

func requestsCards(p corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if _, ok := c.Resources.Limits[corev1.ResourceName(api.ResourceNumber)]; ok {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
