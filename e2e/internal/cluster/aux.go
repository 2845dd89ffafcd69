package cluster

import (
	"fmt"
	"path/filepath"
	"time"
)

// StartAux runs another program beside the cluster (kwok, for `make scale`), logging to
// <run>/logs/<name>.log; Stop ends it with the rest.
func (c *Cluster) StartAux(name, bin string, args ...string) error {
	p, err := startProc(c.logDir, name, bin, args...)
	if err != nil {
		return err
	}
	c.add(p)
	return nil
}

// SchedulerProcess is the running scheduler's process id, the URL of its metrics, and
// when it was started.
func (c *Cluster) SchedulerProcess() (pid int, metrics string, started time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sched.cmd.Process.Pid, c.schedMetrics, c.schedStart
}

// SchedulerGone returns an error naming the scheduler's log when the running scheduler
// has exited (crashed) without the harness stopping it; nil while it runs.
func (c *Cluster) SchedulerGone() error {
	c.mu.Lock()
	p := c.sched
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	if done, err := p.exited(); done {
		return fmt.Errorf("vc-scheduler exited by itself (%v); its log: %s", err, filepath.Join(c.logDir, p.name+".log"))
	}
	return nil
}
