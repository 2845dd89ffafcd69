// Command tessera-simulate runs Tessera's vgpu plugin inside Volcano's real
// scheduler on a described cluster, without an API server:
//
//	tessera-simulate [-f scenario] [-o text|json]
//
// `tessera simulate` runs it: it links Volcano's scheduler, which the tessera CLI
// does not, so it is a command of its own, installed beside tessera.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/internal/sim"
)

func main() {
	err := simulateMain(os.Args[1:])
	if errors.Is(err, cli.ErrUsage) {
		fmt.Fprintf(os.Stderr, "tessera simulate: %v\n\nusage: tessera simulate [-f FILE] [-o text|json]\n", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tessera simulate: %v\n", err)
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
