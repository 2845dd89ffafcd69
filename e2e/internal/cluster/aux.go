package cluster

import "time"

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
