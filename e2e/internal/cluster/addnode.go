package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// AddNode starts a node beside the cluster's (a real-runtime node for the scenario that
// needs one) and waits until it is Ready with its agent's inventory. RemoveNode ends it.
func (c *Cluster) AddNode(ctx context.Context, n Node) (err error) {
	if _, ok := c.node(n.Name); ok {
		return fmt.Errorf("node %s exists", n.Name)
	}
	c.mu.Lock()
	c.added = append(c.added, n)
	c.mu.Unlock()
	start := time.Now()
	if err := c.startNode(ctx, n); err != nil {
		if rerr := c.RemoveNode(ctx, n.Name); rerr != nil {
			klog.ErrorS(rerr, "Removing a node that failed to start", "node", n.Name)
		}
		return fmt.Errorf("node %s: %w (logs in %s)", n.Name, err, c.logDir)
	}
	klog.InfoS("Node added", "node", n.Name, "runtime", n.Runtime, "took", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// RemoveNode ends a node AddNode started, as a machine leaving the cluster: its agent,
// kubelet and runtime stop (with a real runtime every container ends with its namespace),
// its kubelet supervisor ends, its Node, and the pod its agent's token was bound to, are
// deleted, and its cgroups removed. The node's directory stays in the run directory.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	c.mu.Lock()
	i := slices.IndexFunc(c.added, func(n Node) bool { return n.Name == name })
	if i < 0 {
		c.mu.Unlock()
		return fmt.Errorf("node %s was not added by AddNode", name)
	}
	n := c.added[i]
	quit, agent, kubelet, init := c.nodeQuit[name], c.agents[name], c.kubelets[name], c.inits[name]
	c.mu.Unlock()
	if quit != nil {
		close(quit) // the supervisor first, so that it restarts nothing
	}
	for _, p := range []*proc{agent, kubelet, init} {
		if p != nil {
			p.stop(15 * time.Second)
		}
	}
	c.mu.Lock()
	c.added = slices.Delete(c.added, i, i+1)
	delete(c.nodeQuit, name)
	delete(c.agents, name)
	delete(c.kubelets, name)
	delete(c.inits, name)
	delete(c.agentMetrics, name)
	c.mu.Unlock()
	var errs []error
	if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete Node %s: %w", name, err))
	}
	zero := int64(0) // no kubelet is left to confirm a graceful deletion
	err := c.Client.CoreV1().Pods(HarnessNamespace).Delete(ctx, agentIdentityPod(name), metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete the agent identity pod of %s: %w", name, err))
	}
	// Its token was bound to that pod: a node added again under the name gets a new one.
	if err := os.Remove(filepath.Join(c.NodeDir(name), "kubeconfig-agent")); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if n.Runtime == RuntimeContainerd {
		if err := removeCgroups(ctx, c.cgroupRoot(name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
