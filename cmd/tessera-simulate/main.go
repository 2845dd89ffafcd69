// Command tessera-simulate runs Tessera's vgpu plugin inside Volcano's real
// scheduler on a described cluster, without an API server:
//
//	tessera-simulate [-f scenario] [-o text|json]
//	tessera-simulate --from-cluster [--add-nodes N --node-shape SHAPE] [-o text|json] [client flags]
//
// With --from-cluster it reads the live cluster (nodes and their cards, running vGPU
// pods and the cards they hold, pending vGPU pods with their PodGroups, Volcano's
// queues, the scheduler's vgpu arguments) and answers which pending pods N more
// nodes of a shape would place, beside what the cluster places as it is.
//
// `tessera simulate` runs it: it links Volcano's scheduler, which the tessera CLI
// does not, so it is a command of its own, installed beside tessera.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	volcano "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/internal/sim"
)

const usage = "usage: tessera simulate [-f FILE] [-o text|json]\n" +
	"       tessera simulate --from-cluster [--add-nodes N --node-shape SHAPE] [-o text|json] [--kubeconfig ...]\n"

func main() {
	err := simulateMain(context.Background(), defaultEnv(), os.Args[1:])
	if errors.Is(err, cli.ErrUsage) {
		fmt.Fprintf(os.Stderr, "tessera simulate: %v\n\n%s", err, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tessera simulate: %v\n", err)
		os.Exit(1)
	}
}

// env is what the command needs from outside; tests replace every field.
type env struct {
	stdout, stderr io.Writer
	// clients are the cluster's clients for the flags: Kubernetes' and Volcano's.
	clients func(f *cli.ClusterFlags) (kubernetes.Interface, volcano.Interface, error)
	now     func() time.Time
}

func defaultEnv() env {
	return env{stdout: os.Stdout, stderr: os.Stderr, now: time.Now,
		clients: func(f *cli.ClusterFlags) (kubernetes.Interface, volcano.Interface, error) {
			cfg, err := f.RESTConfig()
			if err != nil {
				return nil, nil, err
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return nil, nil, err
			}
			vc, err := volcano.NewForConfig(cfg)
			return kube, vc, err
		}}
}

// maxAddNodes bounds --add-nodes: each added node is simulated card by card.
const maxAddNodes = 500

// flags are the command line.
type flags struct {
	file, out, shape string
	fromCluster      bool
	addNodes         int
	addGiven         bool
	cluster          cli.ClusterFlags
	// help is the flags' help when -h or --help was given.
	help string
}

func parseFlags(args []string) (*flags, error) {
	f := &flags{}
	fs := pflag.NewFlagSet("simulate", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVarP(&f.file, "file", "f", "", "scenario file (YAML); the embedded default when empty")
	fs.StringVarP(&f.out, "output", "o", "text", "output format: text or json")
	fs.BoolVar(&f.fromCluster, "from-cluster", false, "simulate the live cluster of the kubeconfig instead of a scenario")
	fs.IntVar(&f.addNodes, "add-nodes", 0, "with --from-cluster: how many nodes of --node-shape to add (default 1 with --node-shape)")
	fs.StringVar(&f.shape, "node-shape", "", "with --from-cluster: the added nodes' machine, e.g. dgxa100 or H100x8 (MODELxCOUNT)")
	f.cluster.Bind(fs)
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("logtostderr", "true")
	_ = klogFlags.Set("v", "0")
	_ = klogFlags.Set("stderrthreshold", "FATAL")
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		f.help = usage + "\nFlags:\n" + fs.FlagUsages()
		return f, nil
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", cli.ErrUsage, fs.Arg(0))
	}
	f.addGiven = fs.Changed("add-nodes")
	return f, f.check()
}

// check refuses flag values and combinations that mean nothing, naming them.
func (f *flags) check() error {
	switch {
	case f.out != "text" && f.out != "json":
		return fmt.Errorf("%w: -o %q: want text or json", cli.ErrUsage, f.out)
	case f.fromCluster && f.file != "":
		return fmt.Errorf("%w: -f %q and --from-cluster: simulate a scenario file or the live cluster, not both", cli.ErrUsage, f.file)
	case !f.fromCluster && (f.addGiven || f.shape != ""):
		return fmt.Errorf("%w: --add-nodes and --node-shape need --from-cluster", cli.ErrUsage)
	case f.addNodes < 0 || f.addNodes > maxAddNodes:
		return fmt.Errorf("%w: --add-nodes %d: want a whole number in 0..%d", cli.ErrUsage, f.addNodes, maxAddNodes)
	case f.addNodes > 0 && f.shape == "":
		return fmt.Errorf("%w: --add-nodes %d needs --node-shape SHAPE (e.g. dgxa100 or H100x8)", cli.ErrUsage, f.addNodes)
	}
	if f.shape != "" && !f.addGiven {
		f.addNodes = 1
	}
	return nil
}

func simulateMain(ctx context.Context, e env, args []string) error {
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	if f.help != "" {
		_, err := io.WriteString(e.stdout, f.help)
		return err
	}
	if f.fromCluster {
		return fromCluster(ctx, e, f)
	}
	return simulate(e.stdout, f.file, f.out)
}

func simulate(stdout io.Writer, file, out string) error {
	if out != "text" && out != "json" {
		return fmt.Errorf("%w: -o %q: want text or json", cli.ErrUsage, out)
	}
	var s *sim.Scenario
	var err error
	if file == "" {
		s, err = sim.DefaultScenario()
	} else {
		var b []byte
		if b, err = os.ReadFile(file); err != nil {
			return err
		}
		s, err = sim.ParseScenario(b)
	}
	if err != nil {
		return err
	}
	res, err := sim.Run(s)
	if err != nil {
		return err
	}
	sum, err := res.Summarise()
	if err != nil {
		return err
	}
	if out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	sum.WriteText(stdout)
	if len(sum.Overcommitted) > 0 {
		return fmt.Errorf("over-committed cards: %v", sum.Overcommitted)
	}
	return nil
}
