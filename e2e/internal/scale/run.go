package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// Config is one scheduler's run.
type Config struct {
	Mode    Mode
	Bin     *cluster.Binaries
	Kwok    string
	Root    string // repository root
	RunDir  string
	Nodes   int
	Jobs    []JobSpec
	Restart int // jobs of one small pod submitted while the scheduler is down; 0: no restart
	// Rate is jobs per second; 0 submits them all at once (as fast as the client goes).
	Rate float64
	// PodLife is how long kwok keeps a pod Running before it Succeeds.
	PodLife time.Duration
	// Stall ends the wait when no pod has been bound for this long; Timeout in any case.
	Stall, Timeout time.Duration
	// Profile, when set, is the window of each CPU profile taken of the live scheduler
	// while it places the workload (files cpu-NN.pprof and heap.pprof in RunDir), and
	// for 15 s after a restarted scheduler is healthy (restart-cpu.pprof).
	Profile time.Duration
	// CrashAt, when set, kills the scheduler once this fraction of the pods is bound and
	// starts it again at once: a crash mid-burst, after which the new scheduler's first
	// sessions find thousands of pods pending while its cache is still loading the
	// running ones. Not with Profile (the profiles follow one process).
	CrashAt float64
	// SchedulerFlags are passed to vc-scheduler as they are (a log level to diagnose a run).
	SchedulerFlags []string
	Progress       io.Writer
}

// Result is what one scheduler did with the workload.
type Result struct {
	Mode          Mode
	Nodes, Jobs   int
	PodsSubmitted int
	PodsBound     int
	VGPUPodsBound int
	Seconds       float64 // first submit to last bind
	PodsPerSecond float64
	LatencyP50    float64 // seconds, submit to bound
	LatencyP99    float64
	CardsInUse    int
	LowerBound    int
	// What the bound vGPU pods asked for and what the scheduler recorded on their
	// cards, in card cores (100 = a card's SMs) and MiB.
	AskedCores, AskedMiB float64
	HeldCores, HeldMiB   float64
	Overcommitted        []string
	MissingAssignments   int
	Queues               []QueueShare
	SchedulerCPU         float64 // seconds, from first submit to the end of the wait
	RSSMiB, PeakRSSMiB   float64
	SessionCount         float64
	SessionP50           float64 // milliseconds
	SessionP90           float64
	SessionP99           float64
	SessionMean          float64
	LoadStart, LoadEnd   float64
	LoadMean             float64
	// Restart: jobs submitted while the scheduler was down, from its start to the first
	// and to the last of their pods bound (seconds); -1 when some never were.
	// RestartCreated is from its start to the first of their pods created (Volcano's job
	// controller creates them once the scheduler's enqueue has admitted their PodGroups):
	// what the scheduler took to admit and then to place are told apart. -1: none was.
	RestartJobs              int
	RestartFirst, RestartAll float64
	RestartCreated           float64 `json:",omitempty"`
	// RestartPodGroupWrites is how many PodGroup writes the API server served from
	// just before the kill to the last new pod bound (the restarted scheduler's
	// session closes, and Volcano's controllers for the new jobs).
	RestartPodGroupWrites float64 `json:",omitempty"`
	// Crash (CrashAt): pods bound when the scheduler was killed, and seconds from its
	// new start to the next pod bound (-1: none was). The session figures are the
	// restarted scheduler's alone; CPU is both processes'.
	CrashBound   int     `json:",omitempty"`
	CrashResumed float64 `json:",omitempty"`
	StartedAt    time.Time
	// ProfiledPods is how many pods were bound while the CPU profiles ran (-profile),
	// the divisor of the CPU-per-pod breakdown (WriteCPUPerPod); 0 when not profiled.
	ProfiledPods int `json:",omitempty"`
}

// CardCores is the cluster's card cores (100 per card).
func (r *Result) CardCores() float64 { return float64(r.Nodes*CardsPerNode) * 100 }

// Run brings up a cluster, runs the workload through one scheduler and returns the
// figures. The cluster is stopped on return.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	conf, err := WriteConf(cfg.Mode, cfg.Root, cfg.RunDir)
	if err != nil {
		return nil, err
	}
	c, err := cluster.Start(ctx, cluster.Options{Bin: cfg.Bin, RunDir: cfg.RunDir, SchedulerConf: conf,
		// Volcano's job controller creates every pod; at its default 50 requests/s and three
		// workers it, not the scheduler, would set the pace of a thousand-node run.
		ControllerArgs: []string{"--kube-api-qps=1000", "--kube-api-burst=2000", "--worker-threads=16"},
		SchedulerArgs:  schedulerArgs(cfg),
		Progress:       cfg.Progress})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	if err := StartKwok(c, cfg.Kwok, cfg.RunDir, cfg.PodLife); err != nil {
		return nil, err
	}
	// Heartbeats from the start: Volcano drops a node whose handshake is a minute old.
	beat, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go heartbeats(beat, c.Client, cfg.Nodes, cfg.Progress)
	if err := setup(ctx, c, cfg); err != nil {
		return nil, err
	}

	tr, err := Track(ctx, c.Client)
	if err != nil {
		return nil, err
	}
	res := &Result{Mode: cfg.Mode, Nodes: cfg.Nodes, Jobs: len(cfg.Jobs), StartedAt: time.Now().UTC()}
	for _, j := range cfg.Jobs {
		res.PodsSubmitted += j.Pods()
	}
	pid, metricsURL, _ := c.SchedulerProcess()
	before, err := ScrapeHistogram(metricsURL, sessionMetric)
	if err != nil {
		return nil, fmt.Errorf("scheduler metrics: %w", err)
	}
	cpu0, err := CPUTime(pid)
	if err != nil {
		return nil, err
	}
	res.LoadStart = LoadAverage()
	var loads []float64
	fmt.Fprintf(cfg.Progress, "  submitting %d jobs (%d pods), %s\n", len(cfg.Jobs), res.PodsSubmitted, rateText(cfg.Rate))
	prof := startProfiler(ctx, metricsURL, cfg.RunDir, cfg.Profile)
	defer prof.cancel()
	submitted, err := submit(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	last, lastBound := time.Now(), 0
	deadline := time.Now().Add(cfg.Timeout)
	var crashCPU time.Duration // the killed process's
	var restarted time.Time
	for tick := 0; ; tick++ {
		time.Sleep(time.Second)
		n := tr.Bound()
		if n != lastBound {
			if !restarted.IsZero() && res.CrashResumed < 0 {
				res.CrashResumed = time.Since(restarted).Seconds()
			}
			last, lastBound = time.Now(), n
		}
		if cfg.CrashAt > 0 && res.CrashBound == 0 && float64(n) >= cfg.CrashAt*float64(res.PodsSubmitted) {
			used, err := CPUTime(pid)
			if err != nil {
				return nil, err
			}
			crashCPU = used - cpu0
			fmt.Fprintf(cfg.Progress, "  %s: killing the scheduler with %d/%d pods bound, starting it again\n", cfg.Mode, n, res.PodsSubmitted)
			c.KillScheduler()
			if err := c.StartScheduler(ctx); err != nil {
				return nil, fmt.Errorf("restarting the scheduler after the crash: %w", err)
			}
			res.CrashBound, res.CrashResumed = max(n, 1), -1
			pid, metricsURL, restarted = c.SchedulerProcess()
			if cpu0, err = CPUTime(pid); err != nil {
				return nil, err
			}
			before = Histogram{} // the new process's sessions from its start
			last = time.Now()
		}
		if tick%10 == 0 {
			loads = append(loads, LoadAverage())
			fmt.Fprintf(cfg.Progress, "  %s: %d/%d pods bound (load %.1f)\n", cfg.Mode, n, res.PodsSubmitted, loads[len(loads)-1])
		}
		if n >= res.PodsSubmitted || time.Since(last) > cfg.Stall || time.Now().After(deadline) {
			break
		}
		if err := c.SchedulerGone(); err != nil {
			return nil, fmt.Errorf("after %d of %d pods bound: %w", n, res.PodsSubmitted, err)
		}
	}
	if err := c.SchedulerGone(); err != nil {
		return nil, err
	}
	cpu1, err := CPUTime(pid)
	if err != nil {
		return nil, err
	}
	if err := prof.stop(); err != nil {
		return nil, err
	}
	after, err := ScrapeHistogram(metricsURL, sessionMetric)
	if err != nil {
		return nil, err
	}
	res.LoadEnd = LoadAverage()
	res.LoadMean = mean(append(loads, res.LoadEnd))
	res.SchedulerCPU = (cpu1 - cpu0 + crashCPU).Seconds()
	if res.RSSMiB, res.PeakRSSMiB, err = Memory(pid); err != nil {
		return nil, err
	}
	s := after.Since(before)
	res.SessionCount, res.SessionP50, res.SessionP90, res.SessionP99 = s.Count, s.Quantile(0.5), s.Quantile(0.9), s.Quantile(0.99)
	if s.Count > 0 {
		res.SessionMean = s.Sum / s.Count
	}
	if err := figures(res, tr, submitted, cfg); err != nil {
		return nil, err
	}
	if cp, err := ReadCPUProfiles(cfg.RunDir); err != nil {
		return nil, err
	} else if cp != nil {
		res.ProfiledPods = boundWithin(tr.BoundAt(), cp.Start, cp.End)
	}
	if cfg.Restart > 0 {
		if err := restart(ctx, c, tr, cfg, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func schedulerArgs(cfg Config) []string {
	args := append([]string(nil), cfg.SchedulerFlags...)
	if cfg.Profile > 0 {
		args = append(args, "--enable-pprof")
	}
	return args
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
	err := parallel(16, cfg.Nodes, func(i int) error {
		n, err := Node(i)
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

// submit creates the jobs, all at once or at the configured rate, and returns when each
// was created.
func submit(ctx context.Context, c *cluster.Cluster, cfg Config) (map[string]time.Time, error) {
	at := make(map[string]time.Time, len(cfg.Jobs))
	var mu sync.Mutex
	withCards := cfg.Mode != Floor
	start := time.Now()
	err := parallel(8, len(cfg.Jobs), func(i int) error {
		j := cfg.Jobs[i]
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

// jobOf is the job a pod belongs to (the label Volcano's job controller sets).
func jobOf(p *corev1.Pod) string { return p.Labels["volcano.sh/job-name"] }

// figures fills in throughput, latency, cards and shares from what the tracker saw.
func figures(res *Result, tr *Tracker, submitted map[string]time.Time, cfg Config) error {
	first := time.Time{}
	for _, t := range submitted {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	pods := tr.Pods()
	boundAt := tr.BoundAt()
	var lat []float64
	var lastBind time.Time
	for _, p := range pods {
		t, ok := boundAt[p.Namespace+"/"+p.Name]
		sub, known := submitted[jobOf(p)]
		if !ok || !known {
			continue
		}
		res.PodsBound++
		if wantsCards(p) {
			res.VGPUPodsBound++
		}
		lat = append(lat, t.Sub(sub).Seconds())
		if t.After(lastBind) {
			lastBind = t
		}
	}
	sort.Float64s(lat)
	res.LatencyP50, res.LatencyP99 = Percentile(lat, 0.5), Percentile(lat, 0.99)
	if res.PodsBound > 0 {
		res.Seconds = lastBind.Sub(first).Seconds()
		res.PodsPerSecond = float64(res.PodsBound) / res.Seconds
	}
	if cfg.Mode == Floor {
		return nil
	}
	queues := map[string]string{}
	for _, j := range cfg.Jobs {
		queues[j.Name] = j.Queue
	}
	load, held, missing, err := Cards(pods, &api.Decoders{}, func(p *corev1.Pod) string { return queues[jobOf(p)] })
	if err != nil {
		return err
	}
	res.MissingAssignments = missing
	res.CardsInUse = len(load)
	// The bound is of what the bound pods asked for, the same for every scheduler
	// (what a scheduler records may round a request up).
	specs := map[string]JobSpec{}
	for _, j := range cfg.Jobs {
		specs[j.Name] = j
	}
	var asked fairshare.Amount
	for _, p := range pods {
		if _, ok := boundAt[p.Namespace+"/"+p.Name]; ok && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			c, m := specs[jobOf(p)].CardShare()
			asked = asked.Add(fairshare.Amount{MemoryMiB: m, Cores: c})
		}
	}
	res.LowerBound = LowerBound(asked.Cores, asked.MemoryMiB)
	res.AskedCores, res.AskedMiB = asked.Cores, asked.MemoryMiB
	for _, a := range held {
		res.HeldCores += a.Cores
		res.HeldMiB += a.MemoryMiB
	}
	res.Overcommitted = Overcommitted(load)
	cards := float64(cfg.Nodes * CardsPerNode)
	res.Queues = Shares(fairshare.Amount{MemoryMiB: cards * CardMiB, Cores: cards * 100}, Demand(cfg.Jobs), held)
	return nil
}

// restart kills the scheduler, submits cfg.Restart one-pod jobs (a small slice of a
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

// Save writes the result as JSON into dir/<mode>.json.
func Save(res *Result, dir string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, string(res.Mode)+".json"), b, 0o644)
}

// Load reads the results saved in dir, in Modes order; missing ones are skipped.
func Load(dir string) ([]*Result, error) {
	var out []*Result
	for _, m := range Modes {
		b, err := os.ReadFile(filepath.Join(dir, string(m)+".json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		out = append(out, &r)
	}
	return out, nil
}
