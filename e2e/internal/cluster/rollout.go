package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
)

// What `helm upgrade` sets off in a cluster, done to the harness's processes. There the
// scheduler's Deployment and the agents' DaemonSet replace their pods when the rendered
// configuration changes (the chart's checksum annotations): each old pod gets SIGTERM and a
// grace period, the new one starts with the new configuration; the DaemonSet does it one
// node at a time (RollingUpdate, maxUnavailable 1). Here the programs are processes, so the
// harness stops and starts them in the same order, with the configuration the chart put in
// its ConfigMaps.

// podGrace is the grace period of the chart's pods (Kubernetes' default).
const podGrace = 30 * time.Second

// RestartScheduler stops the scheduler as the kubelet stops a pod (SIGTERM, SIGKILL after
// the grace period) and starts it with conf; "" goes back to Opts.SchedulerConf.
func (c *Cluster) RestartScheduler(ctx context.Context, conf string) error {
	c.mu.Lock()
	p := c.sched
	c.schedConf = conf
	c.mu.Unlock()
	if p != nil {
		p.stop(podGrace)
	}
	return c.StartScheduler(ctx)
}

// RestartSchedulerAsIs stops the scheduler and starts it again with the conf it runs
// now, as a pod restart does.
func (c *Cluster) RestartSchedulerAsIs(ctx context.Context) error {
	c.mu.Lock()
	conf := c.schedConf
	c.mu.Unlock()
	return c.RestartScheduler(ctx, conf)
}

// RollAgents replaces every node's agent in turn, with config as the --config file under
// the harness's flags ("" for none: flags only). Each agent is stopped gracefully, started
// again, and its node must be ready with the agent's inventory within timeout before the
// next node's turn.
func (c *Cluster) RollAgents(ctx context.Context, config string, timeout time.Duration) error {
	c.mu.Lock()
	c.agentConfig = config
	c.mu.Unlock()
	for _, n := range c.Opts.Nodes {
		c.mu.Lock()
		p := c.agents[n.Name]
		c.mu.Unlock()
		if p != nil {
			p.stop(podGrace)
		}
		started := time.Now().Truncate(time.Second)
		if err := c.StartAgent(ctx, n.Name); err != nil {
			return fmt.Errorf("agent %s: %w", n.Name, err)
		}
		// The Node still carries the old agent's inventory: wait for the new one's heartbeat.
		name := n.Name
		if err := waitFor(ctx, "agent "+name+" heartbeat", timeout, nil, func(ctx context.Context) (bool, error) {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			hb, err := time.Parse(time.RFC3339, node.Annotations[api.AnnotationHeartbeat])
			return err == nil && !hb.Before(started), err
		}); err != nil {
			return err
		}
		if err := c.WaitNodeReady(ctx, n.Name, timeout); err != nil {
			return err
		}
	}
	return nil
}

// StopAgents stops every node's agent as the kubelets stop the pods of a deleted
// DaemonSet: all at once, each with SIGTERM and the grace period. StartAgent or
// RollAgents starts them again.
func (c *Cluster) StopAgents() {
	c.mu.Lock()
	var ps []*proc
	for _, p := range c.agents {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(podGrace) }()
	}
	wg.Wait()
}

// StopAgent stops the node's agent as the kubelet stops its pod: SIGTERM, then the
// grace period. StartAgent starts it again.
func (c *Cluster) StopAgent(name string) {
	c.mu.Lock()
	p := c.agents[name]
	c.mu.Unlock()
	if p != nil {
		p.stop(podGrace)
	}
}

// StateDir is the node agent's state directory (ld.so.preload, per-container directories).
func (c *Cluster) StateDir(node string) string { return filepath.Join(c.NodeDir(node), "state") }
