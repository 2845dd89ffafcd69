package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/workload"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// draNode is the demo's node whose agent serves its cards as DRA devices of driver
// vgpu.tessera.io instead of vGPU slots.
var draNode = cluster.Node{Name: "gpu-node-dra", Machine: "a30x4", CardAPI: cluster.CardAPIDRA}

// draConf writes the scheduler conf with the predicates plugin's DRA allocation on
// (predicate.DynamicResourceAllocationEnable), beside which Volcano's allocator places
// claims, and returns its path.
func draConf(base, runDir string) (string, error) {
	path := filepath.Join(runDir, "volcano-scheduler-dra.conf")
	return path, cluster.WriteDRASchedulerConf(base, path)
}

// addDRANode gives the cluster what the chart gives it with cardAPI dra (the agents' and
// the scheduler's RBAC, the DeviceClass) and starts the DRA node, ready once its
// ResourceSlice lists every card.
func addDRANode(ctx context.Context, c *cluster.Cluster, conf string) error {
	if _, err := c.EnableDRA(ctx, conf); err != nil {
		return fmt.Errorf("the chart's DRA RBAC and DeviceClass: %w", err)
	}
	return c.AddNode(ctx, draNode)
}

// draLedger adds to the ledger what the ResourceClaims allocated on DRA nodes hold, read
// as `kubectl tessera nodes` reads them: one holder per pod a claim is reserved for, its
// container column naming the claim.
func draLedger(ctx context.Context, client kubernetes.Interface, ledger map[string]*workload.CardUse) error {
	snap, err := cli.Load(ctx, client, pluginargs.Defaults(), time.Now(), cli.Scope{NeedNodes: true})
	if err != nil {
		return err
	}
	for _, n := range snap.NodesView() {
		if n.CardAPI != cluster.CardAPIDRA {
			continue
		}
		if n.ClaimsUnknown != "" {
			return fmt.Errorf("node %s: claims unknown: %s", n.Name, n.ClaimsUnknown)
		}
		for _, card := range n.Cards {
			u := ledger[n.Name+"/"+card.UUID]
			if u == nil {
				continue
			}
			u.MemoryMiB, u.Cores = card.UsedMemoryMiB, card.UsedCores
			for _, t := range card.Pods {
				p := snap.FindPod(t.Namespace, t.Pod)
				h := workload.Holder{Namespace: t.Namespace, Pod: t.Pod, Container: "(claim " + t.Claim + ")", MemoryMiB: t.MemoryMiB, Cores: t.Cores}
				if p != nil {
					h.Queue, h.Phase = cli.Queue(p), p.Status.Phase
				}
				u.Holders = append(u.Holders, h)
			}
		}
	}
	return nil
}

// tesseraNodes is `kubectl tessera nodes NAME...` on the cluster, run in this process.
func tesseraNodes(ctx context.Context, c *cluster.Cluster, names ...string) (string, error) {
	var out, errOut bytes.Buffer
	env := cli.Env{Stdout: &out, Stderr: &errOut, Now: time.Now, Plugin: true,
		Client: func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			return c.Client, "tessera-demo", nil
		}}
	if err := cli.Run(ctx, env, "nodes", names); err != nil {
		return "", fmt.Errorf("kubectl tessera nodes: %w: %s", err, errOut.String())
	}
	return out.String() + errOut.String(), nil
}
