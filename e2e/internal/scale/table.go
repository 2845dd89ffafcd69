package scale

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
)

// Machine describes where the run happened: CPU model, cores, memory.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				model = strings.TrimSpace(line[strings.IndexByte(line, ':')+1:])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%f", &kb)
		mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
	}
	return fmt.Sprintf("%s, %d cores%s", model, runtime.NumCPU(), mem)
}

// WriteTable prints the results side by side as Markdown, with the targets' checks.
func WriteTable(w io.Writer, rs []*Result) {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no results")
		return
	}
	col := func(name string, f func(r *Result) string) {
		fmt.Fprintf(w, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(w, " %s |", f(r))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| |")
	for _, r := range rs {
		fmt.Fprintf(w, " %s |", r.Mode)
	}
	fmt.Fprint(w, "\n|---|")
	for range rs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	gpu := func(f func(r *Result) string) func(r *Result) string {
		return func(r *Result) string {
			if r.Mode == Floor {
				return "—"
			}
			return f(r)
		}
	}
	col("Nodes / jobs / pods submitted", func(r *Result) string { return fmt.Sprintf("%d / %d / %d", r.Nodes, r.Jobs, r.PodsSubmitted) })
	col("Pods bound (vGPU)", func(r *Result) string { return fmt.Sprintf("%d (%d)", r.PodsBound, r.VGPUPodsBound) })
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.DRANodes > 0 }) {
		col("DRA nodes; pods bound through claims", func(r *Result) string {
			if r.DRANodes == 0 {
				return "—"
			}
			return fmt.Sprintf("%d; %d", r.DRANodes, r.ClaimPodsBound)
		})
	}
	col("First submit → last bind", func(r *Result) string { return fmt.Sprintf("%.1f s", r.Seconds) })
	col("**Pods/s**", func(r *Result) string { return fmt.Sprintf("**%.1f**", r.PodsPerSecond) })
	col("Latency p50 / p99 (submit → bound)", func(r *Result) string { return fmt.Sprintf("%.1f / %.1f s", r.LatencyP50, r.LatencyP99) })
	col("Cards in use / lower bound", gpu(func(r *Result) string {
		return fmt.Sprintf("%d / %d (%.2f×)", r.CardsInUse, r.LowerBound, float64(r.CardsInUse)/float64(max(1, r.LowerBound)))
	}))
	col("Card cores / memory recorded ÷ asked", gpu(func(r *Result) string {
		return fmt.Sprintf("%.2f / %.2f", r.HeldCores/max(1, r.AskedCores), r.HeldMiB/max(1, r.AskedMiB))
	}))
	col("Over-committed cards", gpu(func(r *Result) string { return fmt.Sprint(len(r.Overcommitted)) }))
	col("Bound vGPU pods without an assignment", gpu(func(r *Result) string { return fmt.Sprint(r.MissingAssignments) }))
	col("Queue card cores held / weighted max-min (1:2:3)", gpu(func(r *Result) string {
		var parts []string
		for _, q := range r.Queues {
			parts = append(parts, fmt.Sprintf("%.0f/%.0f", q.Held, q.Fair))
		}
		return strings.Join(parts, ", ")
	}))
	col("Largest queue gap to max-min (demand ÷ cards)", gpu(func(r *Result) string {
		gap, contention := QueueGap(r.Queues, r.CardCores())
		return fmt.Sprintf("%.1f pp (%.2f×)", gap, contention)
	}))
	col("Scheduler CPU (submit → end)", func(r *Result) string { return fmt.Sprintf("%.1f s", r.SchedulerCPU) })
	col("Scheduler RSS at end / peak", func(r *Result) string { return fmt.Sprintf("%.0f / %.0f MiB", r.RSSMiB, r.PeakRSSMiB) })
	col("Memory cgroup: peak / limit, OOM kills", func(r *Result) string {
		if r.MemoryLimitMiB == 0 {
			return "no limit"
		}
		return fmt.Sprintf("%.0f / %.0f MiB, %d", r.CgroupPeakMiB, r.MemoryLimitMiB, r.OOMKills)
	})
	col("Sessions: count, p50 / p90 / p99, mean", func(r *Result) string {
		return fmt.Sprintf("%.0f, %.0f / %.0f / %.0f ms, %.0f ms", r.SessionCount, r.SessionP50, r.SessionP90, r.SessionP99, r.SessionMean)
	})
	col("Restart: first / all of the new pods bound after start", func(r *Result) string {
		if r.RestartJobs == 0 {
			return "—"
		}
		created := ""
		if r.RestartCreated != 0 { // results saved before the figure existed have none
			created = "; first created " + secs(r.RestartCreated)
		}
		writes := ""
		if r.RestartPodGroupWrites > 0 {
			writes = fmt.Sprintf("; %.0f PodGroup writes", r.RestartPodGroupWrites)
		}
		return fmt.Sprintf("%s / %s (%d pods%s%s)", secs(r.RestartFirst), secs(r.RestartAll), r.RestartJobs, created, writes)
	})
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.CrashBound > 0 }) {
		col("Crash mid-burst: pods bound when killed; next bind after its new start", func(r *Result) string {
			if r.CrashBound == 0 {
				return "—"
			}
			return fmt.Sprintf("%d; %s", r.CrashBound, secs(r.CrashResumed))
		})
	}
	col("Load average: start, mean, end", func(r *Result) string { return fmt.Sprintf("%.1f, %.1f, %.1f", r.LoadStart, r.LoadMean, r.LoadEnd) })
}

func secs(v float64) string {
	if v < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", v)
}

// WriteTargets states each of issue 16's targets and whether the results meet it.
func WriteTargets(w io.Writer, rs []*Result) {
	by := map[Mode]*Result{}
	for _, r := range rs {
		by[r.Mode] = r
	}
	t := by[Tessera]
	if t == nil {
		return
	}
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	if f := by[Floor]; f != nil && f.PodsPerSecond > 0 {
		fmt.Fprintf(w, "- Tessera throughput ≥ 0.9× the floor's: %.2f× — %s\n", t.PodsPerSecond/f.PodsPerSecond, yes(t.PodsPerSecond >= 0.9*f.PodsPerSecond))
	}
	if d := by[DeviceShare]; d != nil && d.PodsPerSecond > 0 {
		fmt.Fprintf(w, "- Tessera throughput ≥ deviceshare's: %.2f× — %s\n", t.PodsPerSecond/d.PodsPerSecond, yes(t.PodsPerSecond >= d.PodsPerSecond))
	}
	if t.LowerBound > 0 {
		r := float64(t.CardsInUse) / float64(t.LowerBound)
		fmt.Fprintf(w, "- Cards in use ≤ 1.05× the lower bound: %.3f× — %s\n", r, yes(r <= 1.05))
	}
	for _, m := range []Mode{DeviceShare, Tessera} {
		if r := by[m]; r != nil && len(r.Queues) > 0 {
			gap, contention := QueueGap(r.Queues, r.CardCores())
			fmt.Fprintf(w, "- %s: queue shares %.1f pp of the cards' cores from weighted max-min at most (the queues asked for %.2f× the cards%s)\n",
				m, gap, contention, map[bool]string{true: ": contended", false: ": max-min is every queue's demand"}[contention > 1])
		}
	}
	fmt.Fprintf(w, "- 0 over-committed cards: %d — %s\n", len(t.Overcommitted), yes(len(t.Overcommitted) == 0))
	fmt.Fprintf(w, "- Scheduler RSS with %d vGPU pods bound: %.0f MiB (peak %.0f MiB)\n", t.VGPUPodsBound, t.RSSMiB, t.PeakRSSMiB)
	if t.RestartJobs > 0 {
		fmt.Fprintf(w, "- Restart resumes placing within 10 s: first new pod bound %s after the scheduler started — %s\n",
			secs(t.RestartFirst), yes(t.RestartFirst >= 0 && t.RestartFirst <= 10))
	}
}
