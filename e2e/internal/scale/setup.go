package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// setUp is the run's first step: a fresh cluster with the mode's scheduler conf, kwok,
// the node agents' heartbeats, the namespace, the queues and every node Ready. stop
// ends the heartbeats and the cluster.
func setUp(ctx context.Context, cfg Config) (c *cluster.Cluster, stop func(), err error) {
	conf, err := WriteConf(cfg.Mode, cfg.Root, cfg.RunDir)
	if err != nil {
		return nil, nil, err
	}
	var gates map[string]bool
	if cfg.DRAShare > 0 {
		// Every scheduler's control plane alike; only Tessera's allocates claims.
		gates = cluster.DRAGates()
	}
	if cfg.dra() {
		draConf := strings.TrimSuffix(conf, ".conf") + "-dra.conf"
		if err := cluster.WriteDRASchedulerConf(conf, draConf); err != nil {
			return nil, nil, err
		}
		conf = draConf
	}
	var cg *cluster.MemoryCgroup
	if cfg.MemoryLimit > 0 {
		if cg, err = cluster.NewMemoryCgroup(fmt.Sprintf("tessera-scale-%s-%d", cfg.Mode, os.Getpid()), cfg.MemoryLimit); err != nil {
			return nil, nil, err
		}
	}
	c, err = cluster.Start(ctx, cluster.Options{Bin: cfg.Bin, RunDir: cfg.RunDir, SchedulerConf: conf,
		// Volcano's job controller creates every pod; at its default 50 requests/s and three
		// workers it, not the scheduler, would set the pace of a thousand-node run.
		ControllerArgs:  []string{"--kube-api-qps=1000", "--kube-api-burst=2000", "--worker-threads=16"},
		SchedulerArgs:   schedulerArgs(cfg),
		SchedulerCgroup: cg,
		FeatureGates:    gates,
		Progress:        cfg.Progress})
	if err != nil {
		return nil, nil, err
	}
	if cg != nil {
		defer func() {
			if err != nil {
				_ = cg.Remove()
			}
		}()
	}
	if err := StartKwok(c, cfg.Kwok, cfg.RunDir, cfg.PodLife); err != nil {
		c.Stop()
		return nil, nil, err
	}
	// Heartbeats from the start: Volcano drops a node whose handshake is a minute old.
	beat, stopBeat := context.WithCancel(ctx)
	stop = func() {
		stopBeat()
		c.Stop()
		if cg != nil {
			_ = cg.Remove()
		}
	}
	go heartbeats(beat, c.Client, cfg.Nodes, cfg.Progress)
	if err := setup(ctx, c, cfg); err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

func schedulerArgs(cfg Config) []string {
	args := append([]string(nil), cfg.SchedulerFlags...)
	if cfg.Profile > 0 {
		args = append(args, "--enable-pprof")
	}
	return args
}

// setup creates the namespace, the queues and the nodes, and waits until kwok has made
// every node Ready.
func setup(ctx context.Context, c *cluster.Cluster, cfg Config) error {
	start := time.Now()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, q := range Queues {
		queue := &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: q.Name},
			Spec: schedulingv1beta1.QueueSpec{Weight: q.Weight, Reclaimable: ptr(true)}}
		if _, err := c.Volcano.SchedulingV1beta1().Queues().Create(ctx, queue, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("queue %s: %w", q.Name, err)
		}
	}
	if cfg.dra() {
		if err := draObjects(ctx, c, cfg); err != nil {
			return err
		}
	}
	err := parallel(16, cfg.Nodes, func(i int) error {
		n, err := Node(i)
		if cfg.dra() && InShare(i, cfg.DRAShare) {
			n, err = DRANode(i)
		}
		if err != nil {
			return err
		}
		for k, v := range Heartbeat(time.Now()) {
			n.Annotations[k] = v
		}
		// The API server drops a new Node's status; kwok, which makes it Ready, may
		// write it meanwhile: patch the card slots, CPU and memory in.
		status, err := json.Marshal(map[string]any{"status": map[string]any{
			"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable}})
		if err != nil {
			return err
		}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
		if n.Annotations[api.AnnotationCardAPI] != api.CardAPIDRA {
			return nil
		}
		s, err := NodeSlice(i)
		if err != nil {
			return err
		}
		if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s ResourceSlice: %w", n.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for {
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		if ready >= cfg.Nodes {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("%d of %d nodes Ready and untainted after 5 min (kwok log in %s)", ready, cfg.Nodes, c.LogDir())
		}
		time.Sleep(2 * time.Second)
	}
	fmt.Fprintf(cfg.Progress, "  %d kwok nodes Ready in %s\n", cfg.Nodes, time.Since(start).Round(time.Second))
	return nil
}

// draObjects creates what a DRA run needs before its nodes and jobs: the driver's
// DeviceClass, and a claim template per DRA job.
func draObjects(ctx context.Context, c *cluster.Cluster, cfg Config) error {
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, DeviceClass(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("DeviceClass: %w", err)
	}
	return parallel(8, len(cfg.Jobs), func(i int) error {
		j := cfg.Jobs[i]
		if !j.DRA || j.CPUOnly {
			return nil
		}
		t, err := j.ClaimTemplate()
		if err != nil {
			return err
		}
		if _, err := c.Client.ResourceV1().ResourceClaimTemplates(Namespace).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("claim template %s: %w", t.Name, err)
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, f func(int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// heartbeats refreshes every node's agent annotations every 20 s: Tessera's node agent
// beats every 30 s, and the HAMi handshake must stay under a minute old however slow a
// round of patches is on a loaded machine (Volcano's scheduler crashes on an older one
// outside a pod: see Heartbeat). Each patch is stamped when it is sent, not when its
// round began, and a round that takes longer than the period is reported: under
// deviceshare's own patch per pod the API server is slow enough for a round of 1,000
// to have taken most of a minute. Nodes not created yet are skipped.
func heartbeats(ctx context.Context, c kubernetes.Interface, nodes int, progress io.Writer) {
	const period = 20 * time.Second
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		_ = parallel(32, nodes, func(i int) error {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": Heartbeat(time.Now())}})
			_, err := c.CoreV1().Nodes().Patch(ctx, NodeName(i), types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
		if d := time.Since(start); d > period && ctx.Err() == nil {
			fmt.Fprintf(progress, "  heartbeats: a round of %d node patches took %s (period %s)\n", nodes, d.Round(time.Second), period)
		}
	}
}
