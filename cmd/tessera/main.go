// Command tessera is Tessera's user CLI, also installed as kubectl-tessera so that it
// runs as "kubectl tessera ...":
//
//	tessera nodes                    cards per node, with usage, QoS pool, health and pods
//	tessera pod NAME                 a pod's cards and its node handoff
//	tessera explain POD              why a pending vGPU pod does not fit, node by node
//	tessera report --html FILE       a self-contained HTML card map
//	tessera simulate [-f scenario]   the vgpu plugin inside Volcano's scheduler, no API server
//	tessera version                  this build's version and commit
//	tessera completion bash|zsh      a shell completion script
//
// -h or --help, after the tool or any command, prints its help on stdout and exits 0.
// Every command takes -o json. The cluster commands live in package cli.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/cmd/tessera/internal/quietinit"
	"github.com/tessera-gpu/tessera/plugins/sim"
)

func main() {
	quietinit.Restore()
	os.Exit(cli.Main(context.Background(), cli.DefaultEnv(), os.Args[1:], cli.Command{
		Name:    "simulate",
		Summary: "run the vgpu plugin inside Volcano's scheduler on a described cluster (no API server)",
		Help:    simulateHelp,
		Run:     func(_ context.Context, _ cli.Env, args []string) error { return simulateMain(args) },
	}))
}

const simulateHelp = `Flags:
  -f FILE        scenario file (YAML); the embedded default when empty
  -o text|json   output format (default text)
`

func simulateMain(args []string) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is returned as a usage error, with simulateHelp
	file := fs.String("f", "", "scenario file (YAML); the embedded default when empty")
	out := fs.String("o", "text", "output format: text or json")
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "true")
	_ = fs.Set("v", "0")
	_ = fs.Set("stderrthreshold", "FATAL")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	return simulate(*file, *out)
}

func simulate(file, out string) error {
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
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	sum.WriteText(os.Stdout)
	if len(sum.Overcommitted) > 0 {
		return fmt.Errorf("over-committed cards: %v", sum.Overcommitted)
	}
	return nil
}
