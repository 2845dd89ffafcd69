package scale

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// restart is the run's last step (with cfg.Restart): it kills the scheduler, submits cfg.Restart one-pod jobs (a small slice of a
// card each) while it is down, starts it again and measures how long it takes from its
// start to bind them: the time to rebuild its view (and Tessera's card ledger) of every
// running pod and resume placing.
func restart(ctx context.Context, c *cluster.Cluster, tr *Tracker, cfg Config, res *Result) error {
	// The count of PodGroup writes is a diagnosis: a run does not end on it.
	writes0, werr := PodGroupWrites(ctx, c.Client)
	c.KillScheduler()
	jobs := make([]JobSpec, cfg.Restart)
	for i := range jobs {
		jobs[i] = JobSpec{Name: fmt.Sprintf("restart-%03d", i), Queue: Queues[i%len(Queues)].Name, Replicas: 1,
			Cards: 1, MemMiB: 4096, Cores: 5, CPUMilli: 500, HostMiB: 1024}
	}
	for _, j := range jobs {
		if _, err := c.Volcano.BatchV1alpha1().Jobs(Namespace).Create(ctx, j.VolcanoJob(cfg.Mode != Floor), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
	}
	time.Sleep(2 * time.Second)
	if err := c.StartScheduler(ctx); err != nil {
		return err
	}
	_, metricsURL, started := c.SchedulerProcess()
	profiled := make(chan struct{})
	if cfg.Profile > 0 {
		// What the restarted scheduler spends its first 15 s after it is healthy on
		// (restart-cpu.pprof; the run waits for it before the cluster goes).
		prof := startProfiler(ctx, metricsURL, cfg.RunDir, 0)
		pctx, cancel := context.WithTimeout(ctx, 45*time.Second) // a scheduler that stops answering
		go func() {
			defer close(profiled)
			defer cancel()
			if err := prof.fetch(pctx, "/debug/pprof/profile?seconds=15", "restart-cpu.pprof"); err != nil {
				fmt.Fprintf(cfg.Progress, "  restart profile: %v\n", err)
			}
		}()
	} else {
		close(profiled)
	}
	defer func() { <-profiled }()
	res.RestartJobs, res.RestartFirst, res.RestartAll, res.RestartCreated = len(jobs), -1, -1, -1
	names := map[string]bool{}
	for _, j := range jobs {
		names[j.Name] = true
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		bound, seen := tr.BoundAt(), tr.SeenAt()
		var ts []time.Time
		for _, p := range tr.Pods() {
			if !names[jobOf(p)] {
				continue
			}
			if t, ok := seen[p.Namespace+"/"+p.Name]; ok {
				if d := t.Sub(started).Seconds(); res.RestartCreated < 0 || d < res.RestartCreated {
					res.RestartCreated = d
				}
			}
			if t, ok := bound[p.Namespace+"/"+p.Name]; ok {
				ts = append(ts, t)
			}
		}
		if len(ts) == 0 {
			continue
		}
		sort.Slice(ts, func(a, b int) bool { return ts[a].Before(ts[b]) })
		res.RestartFirst = ts[0].Sub(started).Seconds()
		if len(ts) == len(jobs) {
			res.RestartAll = ts[len(ts)-1].Sub(started).Seconds()
			break
		}
	}
	if writes1, err := PodGroupWrites(ctx, c.Client); err == nil && werr == nil {
		res.RestartPodGroupWrites = writes1 - writes0
	} else {
		fmt.Fprintf(cfg.Progress, "  PodGroup writes: %v\n", errors.Join(werr, err))
	}
	// The restarted scheduler must not over-commit either.
	if cfg.Mode != Floor {
		load, _, _, err := Cards(tr.Pods(), &api.Decoders{}, func(*corev1.Pod) string { return "" })
		if err != nil {
			return err
		}
		res.Overcommitted = append(res.Overcommitted, Overcommitted(load)...)
	}
	return nil
}
