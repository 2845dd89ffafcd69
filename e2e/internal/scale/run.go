package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
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
	// MemoryLimit, when positive, runs every scheduler process in a memory cgroup of this
	// many bytes, as the chart's scheduler.resources.limits.memory would (its peak and
	// OOM kills are in the result).
	MemoryLimit int64
	// DRAShare is the share of the nodes that serve their cards through DRA and of the
	// card-asking jobs (marked DRA by MarkDRA) that ask through claims, in the Tessera
	// run; the whole run's control plane then has the DRA gates on (dra.go).
	DRAShare float64
	Progress io.Writer
}

// dra says whether this scheduler's run has DRA nodes and claims: Tessera's only.
func (cfg Config) dra() bool { return cfg.DRAShare > 0 && cfg.Mode == Tessera }

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
	// Under MemoryLimit: the limit, the cgroup's peak (every scheduler process of the run,
	// from its first second) and the kernel's OOM kills in it.
	MemoryLimitMiB, CgroupPeakMiB float64 `json:",omitempty"`
	OOMKills                      int64   `json:",omitempty"`
	// With a DRA share: the nodes publishing ResourceSlices, and the bound pods whose
	// cards are claims (counted in VGPUPodsBound and the card figures too).
	DRANodes           int `json:",omitempty"`
	ClaimPodsBound     int `json:",omitempty"`
	SessionCount       float64
	SessionP50         float64 // milliseconds
	SessionP90         float64
	SessionP99         float64
	SessionMean        float64
	LoadStart, LoadEnd float64
	LoadMean           float64
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
	// BoundBySecond[i] is how many of the workload's pods were seen bound i seconds after
	// the first submit, up to the last bind: the pods-bound-over-time curve (make plots).
	BoundBySecond []int `json:",omitempty"`
	// Samples are the scheduler's CPU time and RSS, read once a second while the run
	// waited for the workload.
	Samples []Sample `json:",omitempty"`
	// Machine and Revision say where and on what code the run was made; Command is the
	// scale tool's arguments.
	Machine, Revision, Command string `json:",omitempty"`
}

// Sample is the scheduler as read from /proc at one moment of the burst.
type Sample struct {
	Seconds float64 // since the first submit
	CPU     float64 // seconds of scheduler CPU since the burst began (a crashed process's included)
	RSSMiB  float64
}

// CardCores is the cluster's card cores (100 per card).
func (r *Result) CardCores() float64 { return float64(r.Nodes*CardsPerNode) * 100 }

// Run brings up a cluster, runs the workload through one scheduler and returns the
// figures. The cluster is stopped on return. Its steps: set the cluster up (setup.go),
// submit the workload and wait for it (burst.go), compute the figures (results.go), and
// restart the scheduler under new work (restart.go).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	c, stop, err := setUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	b, err := runBurst(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	if err := results(b, cfg); err != nil {
		return nil, err
	}
	if cfg.Restart > 0 {
		if err := restart(ctx, c, b.tr, cfg, b.res); err != nil {
			return nil, err
		}
	}
	if cg := c.Opts.SchedulerCgroup; cg != nil {
		peak, kills, err := cg.Peak()
		if err != nil {
			return nil, fmt.Errorf("the scheduler's memory cgroup: %w", err)
		}
		b.res.MemoryLimitMiB, b.res.CgroupPeakMiB, b.res.OOMKills = float64(cfg.MemoryLimit)/(1<<20), float64(peak)/(1<<20), kills
	}
	return b.res, nil
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
