// Command volcano-e2e runs `make volcano-e2e`: Volcano v1.14.1's own scheduling e2e
// suites (test/e2e/schedulingbase and schedulingaction of its module, built with
// go test -c in e2e/tools/volcano-e2e) against Tessera's vc-scheduler on the e2e
// harness's cluster, with kwok worker nodes. The suites run twice on one cluster: with the
// scheduler conf Tessera ships (config/volcano-scheduler.conf) and, after a scheduler
// restart, with the conf Volcano's own CI runs them under. It prints the two results side
// by side and fails only on a spec that passes with Volcano's conf and fails with
// Tessera's. See docs/e2e.md and docs/compatibility.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tessera-gpu/tessera/e2e/internal/cluster"
	"github.com/tessera-gpu/tessera/e2e/internal/scale"
)

// The two confs, in the order they run.
const (
	confTessera = "tessera"
	confVolcano = "volcano-ci"
)

// errRegression is returned when a spec passes under Volcano's CI conf and fails under
// Tessera's.
var errRegression = errors.New("specs that pass with Volcano's CI conf fail with Tessera's conf")

// options are the command's flags.
type options struct {
	root, cache, out, lock string
	suites                 []string
	focus, skip            string
	schedulerFlags         flagList
	seed                   int64
	confs                  []string
	nodes                  NodeShape
	suiteTimeout           time.Duration
}

func main() {
	root, _ := filepath.Abs("..")
	o := options{root: root}
	suites := flag.String("suites", "schedulingbase,schedulingaction", "Volcano's suites to run (packages under volcano.sh/volcano/test/e2e)")
	flag.StringVar(&o.focus, "focus", "", "run only the specs whose text matches this regular expression (Ginkgo's --focus)")
	flag.StringVar(&o.skip, "skip", "Volume Binding Test",
		"skip the specs whose text matches this regular expression (Ginkgo's --skip; by default the volume binding specs, "+
			"which need a real kubelet to mount local volumes and a kind cluster's storage class)")
	confList := flag.String("confs", confTessera+","+confVolcano, "the confs to run, in order ("+confTessera+": config/volcano-scheduler.conf, "+
		confVolcano+": Volcano's CI conf); the table compares what the run directory holds of both")
	flag.Int64Var(&o.seed, "seed", 1, "Ginkgo's --seed: the order of the specs, the same under both confs so that each spec finds the cluster as the other run left it")
	flag.IntVar(&o.nodes.Count, "nodes", 4, "kwok worker nodes")
	cpu := flag.String("node-cpu", "8", "allocatable CPU of each worker node")
	mem := flag.String("node-memory", "16Gi", "allocatable memory of each worker node")
	flag.DurationVar(&o.suiteTimeout, "suite-timeout", 90*time.Minute, "longest run of one suite under one conf (Ginkgo's --timeout)")
	flag.StringVar(&o.lock, "lock", "", "file to flock(2) while the cluster runs (the e2e harness's lock: one cluster at a time)")
	flag.StringVar(&o.out, "out", "", "run directory (default: a new one under the temporary directory)")
	flag.StringVar(&o.cache, "cache", filepath.Join(root, "e2e", ".cache", "bin"), "binary cache directory")
	flag.Var(&o.schedulerFlags, "scheduler-flag", "extra vc-scheduler flag, e.g. -scheduler-flag=--v=4 (repeatable; for diagnosis)")
	report := flag.String("report", "", "only print the table of the run saved in this directory")
	flag.Parse()
	if *report != "" {
		if err := writeTables(*report, os.Stdout); err != nil {
			fail(err)
		}
		return
	}
	for _, s := range strings.Split(*suites, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.suites = append(o.suites, s)
		}
	}
	for _, c := range strings.Split(*confList, ",") {
		c = strings.TrimSpace(c)
		if c != confTessera && c != confVolcano {
			fail(fmt.Errorf("-confs: %q is neither %s nor %s", c, confTessera, confVolcano))
		}
		o.confs = append(o.confs, c)
	}
	var err error
	if o.nodes.CPU, err = resource.ParseQuantity(*cpu); err != nil || o.nodes.CPU.Sign() <= 0 {
		fail(fmt.Errorf("-node-cpu %q: want a positive quantity such as 8 (%v)", *cpu, err))
	}
	if o.nodes.Memory, err = resource.ParseQuantity(*mem); err != nil || o.nodes.Memory.Sign() <= 0 {
		fail(fmt.Errorf("-node-memory %q: want a positive quantity such as 16Gi (%v)", *mem, err))
	}
	if o.nodes.Count < 1 || len(o.suites) == 0 {
		fail(fmt.Errorf("-nodes %d, -suites %q: want at least one node and one suite", o.nodes.Count, *suites))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

// flagList collects a repeated string flag.
type flagList []string

func (l *flagList) String() string     { return strings.Join(*l, " ") }
func (l *flagList) Set(v string) error { *l = append(*l, v); return nil }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "volcano-e2e:", err)
	os.Exit(1)
}

func run(ctx context.Context, o options) error {
	if err := cluster.CheckRoot(); err != nil {
		return err
	}
	e2eDir := filepath.Join(o.root, "e2e")
	fmt.Println("== Building (reuses", o.cache+")")
	bin, err := cluster.BuildControlPlane(ctx, o.root, e2eDir, o.cache, os.Stdout)
	if err != nil {
		return err
	}
	kwok, err := scale.BuildKwok(ctx, e2eDir, o.cache)
	if err != nil {
		return err
	}
	kubeScheduler, err := BuildKubeScheduler(ctx, e2eDir, o.cache)
	if err != nil {
		return err
	}
	suites, err := BuildSuites(ctx, filepath.Join(e2eDir, "tools", "volcano-e2e"), o.cache, o.suites)
	if err != nil {
		return err
	}
	all, err := readConfs(ctx, o.root, filepath.Join(e2eDir, "tools", "volcano-e2e"))
	if err != nil {
		return err
	}
	var confs []namedConf
	for _, name := range o.confs {
		for _, c := range all {
			if c.name == name {
				confs = append(confs, c)
			}
		}
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "tessera-volcano-e2e-"); err != nil {
			return err
		}
	}
	fmt.Println("== Run directory", o.out)
	unlock, err := cluster.Lock(o.lock)
	if err != nil {
		return err
	}
	defer unlock()
	if err := runConfs(ctx, o, bin, kwok, kubeScheduler, suites, confs); err != nil {
		return err
	}
	return writeTables(o.out, os.Stdout)
}

// runConfs brings the cluster up and runs every suite under each conf in turn.
func runConfs(ctx context.Context, o options, bin *cluster.Binaries, kwok, kubeScheduler string, suites map[string]string, confs []namedConf) error {
	confFile := filepath.Join(o.out, "scheduler-conf", "volcano-scheduler.conf")
	if err := os.MkdirAll(filepath.Dir(confFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(confFile, []byte(confs[0].body), 0o644); err != nil {
		return err
	}
	fmt.Println("== Starting the cluster")
	c, err := cluster.Start(ctx, cluster.Options{Bin: bin, RunDir: filepath.Join(o.out, "cluster"), SchedulerConf: confFile,
		SchedulerArgs: o.schedulerFlags, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := StartKwok(c, kwok, filepath.Join(o.out, "cluster")); err != nil {
		return err
	}
	if err := StartKubeScheduler(ctx, c, kubeScheduler); err != nil {
		return err
	}
	start := time.Now()
	if err := CreateWorkers(ctx, c.Client, o.nodes, 3*time.Minute); err != nil {
		return fmt.Errorf("%w (kwok's log in %s)", err, c.LogDir())
	}
	fmt.Printf("  %d kwok nodes of %s CPU, %s memory Ready in %s\n", o.nodes.Count, o.nodes.CPU.String(), o.nodes.Memory.String(),
		time.Since(start).Round(time.Second))
	proj, err := NewConfProjector(ctx, c.Client, confFile, confs[0].body)
	if err != nil {
		return err
	}
	projCtx, stopProj := context.WithCancel(ctx)
	defer stopProj()
	go proj.Run(projCtx)
	for i, conf := range confs {
		if i > 0 {
			fmt.Printf("== Restarting the scheduler with %s's conf\n", conf.name)
			if err := proj.Set(ctx, conf.body); err != nil {
				return err
			}
			if err := c.RestartScheduler(ctx, ""); err != nil {
				return err
			}
		}
		dir := filepath.Join(o.out, conf.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "volcano-scheduler.conf"), []byte(conf.body), 0o644); err != nil {
			return err
		}
		for _, s := range o.suites {
			fmt.Printf("== %s with %s's conf (%s)\n", s, conf.name, conf.source)
			gone, err := ResetQueues(ctx, c.Volcano, time.Minute)
			if err != nil {
				return err
			}
			if len(gone) > 0 {
				fmt.Printf("  deleted the queues earlier specs left behind: %s\n", strings.Join(gone, ", "))
			}
			if err := runSuite(ctx, suites[s], s, dir, c.Kubeconfig, o); err != nil {
				return err
			}
			if err := c.SchedulerGone(); err != nil {
				return fmt.Errorf("during %s with %s's conf: %w", s, conf.name, err)
			}
		}
	}
	return nil
}

// writeTables compares the run's two confs and writes the table to w, table.txt and
// table.md in dir. It returns errRegression when a spec passes only with Volcano's conf.
func writeTables(dir string, w *os.File) error {
	var res [2]Results
	for i, conf := range []string{confTessera, confVolcano} {
		files, err := filepath.Glob(filepath.Join(dir, conf, "*.json"))
		if err != nil {
			return err
		}
		byName := map[string]string{}
		for _, f := range files {
			byName[strings.TrimSuffix(filepath.Base(f), ".json")] = f
		}
		if res[i], err = LoadResults(byName); err != nil {
			return err
		}
	}
	rows := Compare(res[0], res[1])
	var txt, md strings.Builder
	if err := WriteTable(&txt, rows); err != nil {
		return err
	}
	if err := WriteMarkdown(&md, rows); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.txt"), []byte(txt.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s\nTable in %s (Markdown: table.md); each suite's log and Ginkgo JSON report in %s/{%s,%s}/\n",
		txt.String(), filepath.Join(dir, "table.txt"), dir, confTessera, confVolcano)
	if Summarize(rows).Regressions > 0 {
		return errRegression
	}
	return nil
}
