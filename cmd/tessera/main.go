// Command tessera is Tessera's user CLI, also installed as kubectl-tessera so that it
// runs as "kubectl tessera ...":
//
//	tessera nodes                    cards per node, with usage, QoS pool, health and pods
//	tessera pod NAME                 a pod's cards and its node handoff
//	tessera explain POD              why a pending vGPU pod does not fit, node by node
//	tessera report --html FILE       a self-contained HTML card map
//	tessera simulate [-f scenario]   the vgpu plugin inside Volcano's scheduler, no API server
//
// Every command takes -o json. The cluster commands live in package cli.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/cmd/tessera/internal/quietinit"
	"github.com/tessera-gpu/tessera/internal/sim"
)

func main() {
	quietinit.Restore()
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, cli.Usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	if cmd == "simulate" {
		err = simulateMain(args)
	} else {
		err = cli.Run(context.Background(), cli.DefaultEnv(), cmd, args)
	}
	if errors.Is(err, cli.ErrUsage) {
		fmt.Fprintf(os.Stderr, "tessera %s: %v\n\n%s", cmd, err, cli.Usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tessera %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func simulateMain(args []string) error {
	fs := flag.NewFlagSet("simulate", flag.ExitOnError)
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
