package scale

import (
	"context"
	"fmt"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
)

// burst is the workload's run through the scheduler: what the later steps read.
type burst struct {
	res       *Result
	tr        *Tracker
	submitted map[string]time.Time // job name → when it was created
	began     time.Time            // just before the first submit
	samples   []sample
	loads     []float64

	// The scheduler process measured: after a crash (Config.CrashAt), the restarted one.
	pid        int
	metricsURL string
	cpu0       time.Duration // its CPU time when the measure began
	crashCPU   time.Duration // the killed process's, when one was
	sessions0  Histogram     // its session histogram when the measure began

	claims []resourcev1.ResourceClaim // with a DRA share: the claims at the end of the wait
}

// sample is the scheduler's CPU and RSS read at one moment of the wait.
type sample struct {
	at          time.Time
	cpu, rssMiB float64
}

// runBurst is the run's second step: it submits the workload, waits until every pod is
// bound, nothing more binds for cfg.Stall or cfg.Timeout passes (killing and restarting
// the scheduler on the way with cfg.CrashAt), and reads the scheduler's CPU, memory and
// session figures into the result.
func runBurst(ctx context.Context, c *cluster.Cluster, cfg Config) (*burst, error) {
	b, err := newBurst(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "  submitting %d jobs (%d pods), %s\n", len(cfg.Jobs), b.res.PodsSubmitted, rateText(cfg.Rate))
	prof := startProfiler(ctx, b.metricsURL, cfg.RunDir, cfg.Profile)
	defer prof.cancel()
	b.began = time.Now()
	if b.submitted, err = submit(ctx, c, cfg); err != nil {
		return nil, err
	}
	if err := b.wait(ctx, c, cfg); err != nil {
		return nil, err
	}
	if cfg.dra() {
		list, err := c.Client.ResourceV1().ResourceClaims(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing the claims: %w", err)
		}
		b.claims = list.Items
	}
	if err := c.SchedulerGone(); err != nil {
		return nil, err
	}
	cpu1, err := CPUTime(b.pid)
	if err != nil {
		return nil, err
	}
	if err := prof.stop(); err != nil {
		return nil, err
	}
	return b, b.finish(cpu1)
}

// newBurst starts watching the pods and takes the scheduler's figures before the burst.
func newBurst(ctx context.Context, c *cluster.Cluster, cfg Config) (*burst, error) {
	tr, err := Track(ctx, c.Client)
	if err != nil {
		return nil, err
	}
	b := &burst{tr: tr, res: &Result{Mode: cfg.Mode, Nodes: cfg.Nodes, Jobs: len(cfg.Jobs), StartedAt: time.Now().UTC()}}
	for _, j := range cfg.Jobs {
		b.res.PodsSubmitted += j.Pods()
	}
	b.pid, b.metricsURL, _ = c.SchedulerProcess()
	if b.sessions0, err = ScrapeHistogram(b.metricsURL, sessionMetric); err != nil {
		return nil, fmt.Errorf("scheduler metrics: %w", err)
	}
	if b.cpu0, err = CPUTime(b.pid); err != nil {
		return nil, err
	}
	b.res.LoadStart = LoadAverage()
	return b, nil
}

// wait polls once a second until every pod is bound, nothing has bound for cfg.Stall,
// or cfg.Timeout has passed; with cfg.CrashAt it kills the scheduler once that fraction
// of the pods is bound and starts it again.
func (b *burst) wait(ctx context.Context, c *cluster.Cluster, cfg Config) error {
	res := b.res
	last, lastBound := time.Now(), 0
	deadline := time.Now().Add(cfg.Timeout)
	var restarted time.Time
	for tick := 0; ; tick++ {
		time.Sleep(time.Second)
		n := b.tr.Bound()
		if n != lastBound {
			if !restarted.IsZero() && res.CrashResumed < 0 {
				res.CrashResumed = time.Since(restarted).Seconds()
			}
			last, lastBound = time.Now(), n
		}
		b.sample()
		if cfg.CrashAt > 0 && res.CrashBound == 0 && float64(n) >= cfg.CrashAt*float64(res.PodsSubmitted) {
			var err error
			if restarted, err = b.crash(ctx, c, cfg, n); err != nil {
				return err
			}
			last = time.Now()
		}
		if tick%10 == 0 {
			b.loads = append(b.loads, LoadAverage())
			fmt.Fprintf(cfg.Progress, "  %s: %d/%d pods bound (load %.1f)\n", cfg.Mode, n, res.PodsSubmitted, b.loads[len(b.loads)-1])
		}
		if n >= res.PodsSubmitted || time.Since(last) > cfg.Stall || time.Now().After(deadline) {
			return nil
		}
		if err := c.SchedulerGone(); err != nil {
			return fmt.Errorf("after %d of %d pods bound: %w", n, res.PodsSubmitted, err)
		}
	}
}

// crash kills the scheduler with bound pods bound and starts it again at once; the
// measure goes on with the new process (its CPU added to the killed one's).
func (b *burst) crash(ctx context.Context, c *cluster.Cluster, cfg Config, bound int) (restarted time.Time, err error) {
	used, err := CPUTime(b.pid)
	if err != nil {
		return time.Time{}, err
	}
	b.crashCPU = used - b.cpu0
	fmt.Fprintf(cfg.Progress, "  %s: killing the scheduler with %d/%d pods bound, starting it again\n", cfg.Mode, bound, b.res.PodsSubmitted)
	c.KillScheduler()
	if err := c.StartScheduler(ctx); err != nil {
		return time.Time{}, fmt.Errorf("restarting the scheduler after the crash: %w", err)
	}
	b.res.CrashBound, b.res.CrashResumed = max(bound, 1), -1
	b.pid, b.metricsURL, restarted = c.SchedulerProcess()
	if b.cpu0, err = CPUTime(b.pid); err != nil {
		return time.Time{}, err
	}
	b.sessions0 = Histogram{} // the new process's sessions from its start
	return restarted, nil
}

// finish reads the scheduler's figures at the end of the burst (cpu1: its CPU time then).
func (b *burst) finish(cpu1 time.Duration) error {
	res := b.res
	after, err := ScrapeHistogram(b.metricsURL, sessionMetric)
	if err != nil {
		return err
	}
	res.LoadEnd = LoadAverage()
	res.LoadMean = mean(append(b.loads, res.LoadEnd))
	res.SchedulerCPU = (cpu1 - b.cpu0 + b.crashCPU).Seconds()
	if res.RSSMiB, res.PeakRSSMiB, err = Memory(b.pid); err != nil {
		return err
	}
	s := after.Since(b.sessions0)
	res.SessionCount, res.SessionP50, res.SessionP90, res.SessionP99 = s.Count, s.Quantile(0.5), s.Quantile(0.9), s.Quantile(0.99)
	if s.Count > 0 {
		res.SessionMean = s.Sum / s.Count
	}
	return nil
}

// sample reads the scheduler's CPU time (since the measure began, a crashed process's
// included) and RSS. A process that is gone is not sampled: wait reports it.
func (b *burst) sample() {
	used, err := CPUTime(b.pid)
	if err != nil {
		return
	}
	rss, _, err := Memory(b.pid)
	if err != nil {
		return
	}
	b.samples = append(b.samples, sample{at: time.Now(), cpu: (used - b.cpu0 + b.crashCPU).Seconds(), rssMiB: rss})
}

// submit creates the jobs, all at once or at the configured rate, and returns when each
// was created.
func submit(ctx context.Context, c *cluster.Cluster, cfg Config) (map[string]time.Time, error) {
	at := make(map[string]time.Time, len(cfg.Jobs))
	var mu sync.Mutex
	withCards := cfg.Mode != Floor
	start := time.Now()
	err := parallel(8, len(cfg.Jobs), func(i int) error {
		j := cfg.Jobs[i]
		j.DRA = j.DRA && cfg.dra()
		if cfg.Rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		now := time.Now()
		if _, err := c.Volcano.BatchV1alpha1().Jobs(Namespace).Create(ctx, j.VolcanoJob(withCards), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
		mu.Lock()
		at[j.Name] = now
		mu.Unlock()
		return nil
	})
	return at, err
}

func rateText(rate float64) string {
	if rate <= 0 {
		return "in one burst"
	}
	return fmt.Sprintf("%.1f jobs/s", rate)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(max(1, len(v)))
}
