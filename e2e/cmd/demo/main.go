// Command demo is `make demo`: it builds (or reuses) the binaries, brings up a local
// cluster (etcd, kube-apiserver, Volcano's controllers, Tessera's vc-scheduler, two
// simulated GPU nodes whose agents serve vGPU slots and one whose agent serves its cards
// as DRA devices), submits the sample workload from config/samples/ (and, for the DRA
// node, config/samples/dra/), and prints what landed where. With --keep the cluster stays
// up until Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

func main() {
	root, _ := filepath.Abs("..")
	reclaim := flag.Bool("reclaim", true, "after the table, show a queue reclaiming cards from another (a second table)")
	keep := flag.Bool("keep", false, "leave the cluster running (until Ctrl-C) and print kubectl instructions")
	samples := flag.String("samples", filepath.Join(root, "config", "samples"), "directory of YAML files to submit, in name order")
	out := flag.String("out", "", "file for the placement table (default <run dir>/placement.txt)")
	cache := flag.String("cache", filepath.Join(root, "e2e", ".cache", "bin"), "binary cache directory")
	settle := flag.Duration("settle", 3*time.Minute, "longest wait for the workload to settle")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, root, *samples, *out, *cache, *keep, *reclaim, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, samples, out, cache string, keep, reclaim bool, settle time.Duration) error {
	start := time.Now()
	if err := cluster.CheckRoot(); err != nil {
		return err
	}
	fmt.Println("== Building (first run: ~10 min on 2 cores; later runs reuse", cache+")")
	bin, err := cluster.Build(ctx, root, filepath.Join(root, "e2e"), cache, os.Stdout)
	if err != nil {
		return err
	}
	runDir, err := os.MkdirTemp("", "tessera-demo-")
	if err != nil {
		return err
	}
	fmt.Println("== Starting the cluster (run directory", runDir+")")
	// The scheduler allocates ResourceClaims too (the DRA node's), with the DRA alpha
	// gates on the control plane, the kubelets and vc-scheduler.
	conf, err := draConf(filepath.Join(root, "config", "volcano-scheduler.conf"), runDir)
	if err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Options{Bin: bin, RunDir: runDir, Progress: os.Stdout, ChartDir: filepath.Join(root, "charts", "tessera"),
		SchedulerConf: conf, FeatureGates: cluster.DRAGates(),
		Nodes: []cluster.Node{{Name: "gpu-node-1", Machine: "dgxa100"}, {Name: "gpu-node-2", Machine: "a30x4"}}})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("== Tearing down")
		c.Stop()
	}()
	// The protections a chart install ships: tenants cannot choose cards, patch an
	// assignment or override the hook library's environment (docs/security.md).
	fmt.Println("== Applying the chart's admission policies")
	policies, err := c.ApplyAdmissionPolicies(ctx, filepath.Join(root, "charts", "tessera"))
	if err != nil {
		return err
	}
	fmt.Println("  ", strings.Join(policies.Bindings, ", "))
	fmt.Println("== Adding", draNode.Name, "(4× A30 as DRA devices of", cluster.DRADriver+"; the chart's DeviceClass and DRA RBAC)")
	draStart := time.Now()
	if err := addDRANode(ctx, c, conf); err != nil {
		return err
	}
	fmt.Println("   ready with its ResourceSlice in", time.Since(draStart).Round(100*time.Millisecond))
	fmt.Println("== Submitting", samples)
	names, err := apply(ctx, c, samples)
	if err != nil {
		return err
	}
	if st, err := os.Stat(filepath.Join(samples, "dra")); err == nil && st.IsDir() {
		more, err := apply(ctx, c, filepath.Join(samples, "dra"))
		if err != nil {
			return err
		}
		names = append(names, more...)
	}
	for _, n := range names {
		fmt.Println("  ", n)
	}
	fmt.Println("== Waiting for the workload to settle")
	if err := waitSettled(ctx, c, "tessera-demo", settle); err != nil {
		fmt.Println("  ", err)
	}
	table, err := placement(ctx, c, "tessera-demo")
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(runDir, "placement.txt")
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		return err
	}
	fmt.Print("\n", table, "\n")
	fmt.Printf("Table written to %s; logs in %s (%s in all)\n", out, c.LogDir(), time.Since(start).Round(time.Second))
	fmt.Println("== kubectl tessera nodes", draNode.Name, "(the DRA node's cards and what its claims consume)")
	nodes, err := tesseraNodes(ctx, c, draNode.Name)
	if err != nil {
		return err
	}
	fmt.Print(nodes)
	fmt.Println("== Metrics (Prometheus text format; scrape these while the cluster runs, e.g. with KEEP=1)")
	lines, err := showMetrics(ctx, c, []string{"gpu-node-1", "gpu-node-2"})
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Println("  ", l)
	}
	if reclaim {
		fmt.Println("== Reclaim between queues")
		lines, err := showReclaim(ctx, c, "tessera-demo", settle)
		if err != nil {
			return err
		}
		for _, l := range lines {
			fmt.Println("  ", l)
		}
		after, err := placement(ctx, c, "tessera-demo")
		if err != nil {
			return err
		}
		fmt.Print("\n", after, "\n")
	}
	if !keep {
		return nil
	}
	fmt.Printf(`
The cluster stays up until Ctrl-C. In another shell:
  export KUBECONFIG=%s
  kubectl get nodes
  kubectl -n tessera-demo get vcjob,podgroup,pods -o wide
  kubectl -n tessera-demo get pod train-llm-worker-0 -o jsonpath='{.metadata.annotations.tessera\.io/assignment}'
  kubectl get node gpu-node-1 -o jsonpath='{.metadata.annotations.tessera\.io/inventory}'
  kubectl -n tessera-demo get resourceclaims -o wide      # the DRA node's claims
  %s nodes      # Tessera's CLI: every card, the DRA node's with its claims
What each container received: %s/nodes/<node>/records/*.json
Metrics: curl -s %s | grep ^tessera_   (agents, with a bearer token that may get /metrics: %s, %s)
`, c.Kubeconfig, bin.KubectlTessera, runDir, c.SchedulerMetricsURL(), c.AgentMetricsURL("gpu-node-1"), c.AgentMetricsURL("gpu-node-2"))
	<-ctx.Done()
	return nil
}
