// Command scale runs `make scale`: a control plane with kwok GPU nodes, one generated
// workload of VolcanoJobs, placed in turn by Volcano with no device plugin (the floor),
// Volcano's deviceshare with VGPUEnable and Tessera, each on a fresh cluster, and one
// table of the three side by side. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/scale"
)

func main() {
	root, _ := filepath.Abs("..")
	nodes := flag.Int("nodes", 1000, "kwok GPU nodes (8 cards each)")
	jobs := flag.Int("jobs", 0, "VolcanoJobs to submit (0: 2.1 per node, about 8 vGPU pods per node)")
	rate := flag.Float64("rate", 0, "jobs per second; 0 submits them in one burst")
	seed := flag.Int64("seed", 16, "workload seed: the same seed gives the same jobs")
	cpuOnly := flag.Float64("cpu-only", 0.15, "fraction of jobs that ask for no card")
	schedulers := flag.String("schedulers", "floor,deviceshare,tessera", "schedulers to run, in order (floor, deviceshare, tessera)")
	restart := flag.Int("restart", 20, "after the workload, kill the scheduler, submit this many one-pod jobs and restart it (0: no restart)")
	podLife := flag.Duration("pod-life", 2*time.Hour, "how long kwok keeps a pod Running before it Succeeds")
	stall := flag.Duration("stall", 90*time.Second, "stop waiting when no pod has been bound for this long")
	timeout := flag.Duration("timeout", 12*time.Minute, "longest wait for the workload of one scheduler")
	lock := flag.String("lock", "", "file to flock(2) around each scheduler's cluster (the e2e ports are shared)")
	crashAt := flag.Float64("crash-at", 0, "kill the scheduler once this fraction of the pods is bound (0.3: 30%) and start it again at once, a crash mid-burst; the over-commit check then covers what the restarted scheduler placed while its cache was loading (0: no crash; not with -profile)")
	memLimit := flag.String("scheduler-memory-limit", "", "run each scheduler in a memory cgroup of this size, as the chart's scheduler.resources.limits.memory does (e.g. 3Gi); the result records its peak and OOM kills")
	profile := flag.Duration("profile", 0, "take CPU profiles of this length, back to back, of the live scheduler while it places the workload (cpu-NN.pprof, heap.pprof in each scheduler's directory; 0: none)")
	out := flag.String("out", "", "directory for the results (default: a new run directory)")
	rev := flag.String("revision", "", "the code's revision, saved with the results (make scale passes its REVISION; default: git's)")
	data := flag.String("data", "", "directory to save each scheduler's results in as well, without the run's logs (make plots reads docs/data/scale-*)")
	report := flag.String("report", "", "only print the table of the results saved in this directory")
	var schedFlags flagList
	flag.Var(&schedFlags, "scheduler-flag", "extra vc-scheduler flag, e.g. -scheduler-flag=--v=4 (repeatable; for diagnosis: verbose logs slow the scheduler)")
	draShare := flag.Float64("dra-share", 0, "in the Tessera run, this share of the GPU nodes publish their cards as ResourceSlices (the agent's DRA driver) and the same share of the card-asking jobs ask through ResourceClaimTemplates; the cluster runs with the DRA feature gates for every scheduler (0: none; the floor and deviceshare runs submit those jobs as without the flag)")
	cache := flag.String("cache", filepath.Join(root, "e2e", ".cache", "bin"), "binary cache directory")
	flag.Parse()
	if *report != "" {
		rs, err := scale.Load(*report)
		if err != nil {
			fail(err)
		}
		scale.WriteTable(os.Stdout, rs)
		fmt.Println()
		scale.WriteTargets(os.Stdout, rs)
		if err := writeCPUPerPod(*report, rs); err != nil {
			fail(err)
		}
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *jobs == 0 {
		*jobs = *nodes * 21 / 10
	}
	var modes []scale.Mode
	for _, s := range strings.Split(*schedulers, ",") {
		m, err := scale.ParseMode(strings.TrimSpace(s))
		if err != nil {
			fail(err)
		}
		modes = append(modes, m)
	}
	if *crashAt < 0 || *crashAt >= 1 || *crashAt > 0 && *profile > 0 {
		fail(fmt.Errorf("-crash-at %v: want a fraction in [0, 1), and no -profile with it (the profiles follow one process)", *crashAt))
	}
	if err := scale.CheckDRAShare(*draShare); err != nil {
		fail(err)
	}
	workload := scale.Generate(*jobs, *seed, *cpuOnly)
	scale.MarkDRA(workload, *draShare)
	cfg := scale.Config{Nodes: *nodes, Jobs: workload, DRAShare: *draShare,
		Rate: *rate, Restart: *restart, PodLife: *podLife, Stall: *stall, Timeout: *timeout, Profile: *profile, CrashAt: *crashAt, SchedulerFlags: schedFlags, Root: root, Progress: os.Stdout}
	if *memLimit != "" {
		q, err := resource.ParseQuantity(*memLimit)
		if err != nil || q.Value() <= 0 {
			fail(fmt.Errorf("-scheduler-memory-limit %q: want a positive quantity such as 3Gi (%v)", *memLimit, err))
		}
		cfg.MemoryLimit = q.Value()
	}
	if *rev == "" {
		*rev = revision(root)
	}
	where := provenance{machine: scale.Machine(), revision: *rev, command: strings.Join(os.Args[1:], " ")}
	if err := run(ctx, *cache, *out, *data, *lock, modes, cfg, where); err != nil {
		fail(err)
	}
}

// provenance is where and on what code a run was made, saved with its results.
type provenance struct{ machine, revision, command string }

// revision is the repository's commit, with -dirty when the working tree differs from it.
func revision(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if exec.Command("git", "-C", root, "diff", "--quiet", "HEAD", "--").Run() != nil {
		rev += "-dirty"
	}
	return rev
}

// flagList collects a repeated string flag.
type flagList []string

func (l *flagList) String() string     { return strings.Join(*l, " ") }
func (l *flagList) Set(v string) error { *l = append(*l, v); return nil }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

func run(ctx context.Context, cache, out, data, lock string, modes []scale.Mode, cfg scale.Config, where provenance) error {
	root := cfg.Root
	if err := cluster.CheckRoot(); err != nil {
		return err
	}
	fmt.Println("== Building (reuses", cache+")")
	bin, err := cluster.Build(ctx, root, filepath.Join(root, "e2e"), cache, os.Stdout)
	if err != nil {
		return err
	}
	if cfg.Kwok, err = scale.BuildKwok(ctx, filepath.Join(root, "e2e"), cache); err != nil {
		return err
	}
	cfg.Bin = bin
	if out == "" {
		if out, err = os.MkdirTemp("", "tessera-scale-"); err != nil {
			return err
		}
	}
	fmt.Println("== Results in", out, "| machine:", scale.Machine())
	if data != "" {
		// The data directory holds this run's results alone.
		for _, m := range scale.Modes {
			if err := os.Remove(filepath.Join(data, string(m)+".json")); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	var failed []error
	for _, m := range modes {
		cfg.Mode = m
		cfg.RunDir = filepath.Join(out, string(m))
		// A fresh cluster each time: no etcd data or logs of an earlier run, and no
		// result of one left to be reported if this one fails.
		if err := os.RemoveAll(cfg.RunDir); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(out, string(m)+".json")); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
			return err
		}
		unlock, err := flock(lock)
		if err != nil {
			return err
		}
		fmt.Printf("== %s: %d nodes, %d jobs\n", m, cfg.Nodes, len(cfg.Jobs))
		res, err := scale.Run(ctx, cfg)
		unlock()
		if err != nil {
			// The others still run: a scheduler that crashes is a finding of the
			// comparison, not a reason to lose the rest of it.
			failed = append(failed, fmt.Errorf("%s: %w", m, err))
			fmt.Printf("== %s failed: %v\n", m, err)
			if ctx.Err() != nil {
				return errors.Join(failed...)
			}
			continue
		}
		res.Machine, res.Revision, res.Command = where.machine, where.revision, where.command
		if err := scale.Save(res, out); err != nil {
			return err
		}
		if data != "" {
			if err := os.MkdirAll(data, 0o755); err != nil {
				return err
			}
			if err := scale.Save(res, data); err != nil {
				return err
			}
		}
	}
	if len(failed) == len(modes) {
		return errors.Join(failed...)
	}
	rs, err := scale.Load(out)
	if err != nil {
		return err
	}
	fmt.Println()
	scale.WriteTable(os.Stdout, rs)
	fmt.Println()
	scale.WriteTargets(os.Stdout, rs)
	if err := writeCPUPerPod(out, rs); err != nil {
		return err
	}
	return errors.Join(failed...)
}

// writeCPUPerPod prints the CPU-per-pod breakdown of the profiled schedulers, if any.
func writeCPUPerPod(dir string, rs []*scale.Result) error {
	var b strings.Builder
	if err := scale.WriteCPUPerPod(&b, dir, rs); err != nil {
		return err
	}
	if b.Len() > 0 {
		fmt.Println()
		fmt.Print(b.String())
	}
	return nil
}

// flock takes an exclusive lock on file (none when file is empty) until unlock.
func flock(file string) (unlock func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", file, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
