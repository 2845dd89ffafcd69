package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/internal/sim"
)

// fromCluster answers the capacity question for the live cluster: it reads the
// cluster, runs the scheduler's sessions on it as it is and with the nodes added,
// and prints the pending pods side by side.
func fromCluster(ctx context.Context, e env, f *flags) error {
	shape := sim.Shape{}
	if f.shape != "" {
		var err error
		if shape, err = sim.ParseShape(f.shape); err != nil {
			return fmt.Errorf("%w: --node-shape: %v", cli.ErrUsage, err)
		}
	}
	kube, vc, err := e.clients(&f.cluster)
	if err != nil {
		return err
	}
	warn := func(s string) { fmt.Fprintf(e.stderr, "warning: %s\n", s) }
	c, source, err := readCluster(ctx, kube, vc, &f.cluster, e.now(), warn)
	if err != nil {
		return err
	}
	live := sim.FromCluster(c)
	klog.V(1).InfoS("Simulating the live cluster", "hosts", len(live.Scenario.Hosts), "jobs", len(live.Scenario.Jobs),
		"pending", len(live.Pending), "added", f.addNodes, "shape", f.shape)
	plan, err := sim.PlanCapacity(live, shape, f.addNodes)
	if err != nil {
		return err
	}
	plan.SchedulerConf = source
	return writePlan(e.stdout, plan, f.out)
}

// readCluster reads what the scheduler would see: the vgpu arguments from its conf
// (as explain finds them; source says where), every node and non-terminated pod, and Volcano's
// PodGroups and Queues. Without Volcano's CRDs there are no queues or PodGroups:
// every pod is then a gang of one in the default queue, which the warning says.
func readCluster(ctx context.Context, kube kubernetes.Interface, vc volcano.Interface, f *cli.ClusterFlags, now time.Time,
	warn func(string)) (*sim.Cluster, string, error) {
	args, source, err := f.SchedulerArgs(ctx, kube, warn)
	if err != nil {
		return nil, "", err
	}
	snap, err := cli.Load(ctx, kube, args, now, cli.Scope{AllNamespaces: true, NeedNodes: true})
	if err != nil {
		return nil, "", err
	}
	for _, gap := range snap.Unread {
		warn("partial view: " + gap)
	}
	c := &sim.Cluster{Now: snap.Now, Args: snap.Args, Nodes: snap.Nodes, Pods: snap.Pods}
	pgs, err := vc.SchedulingV1beta1().PodGroups("").List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		warn("Volcano's PodGroups are not served (its CRDs are not installed?): every vGPU pod is simulated as a gang of one")
	case err != nil:
		return nil, "", fmt.Errorf("list Volcano PodGroups: %w", err)
	default:
		c.PodGroups = pgs.Items
	}
	queues, err := vc.SchedulingV1beta1().Queues().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		warn("Volcano's Queues are not served: every vGPU pod is simulated in the default queue")
	case err != nil:
		return nil, "", fmt.Errorf("list Volcano queues: %w", err)
	default:
		c.Queues = queues.Items
	}
	return c, source, nil
}

// writePlan prints the plan as text or JSON.
func writePlan(w io.Writer, p *sim.Plan, out string) error {
	if out == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	return p.WriteText(w)
}
