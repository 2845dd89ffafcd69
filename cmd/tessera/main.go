// Command tessera is Tessera's user CLI. Today it has one command:
//
//	tessera simulate [-f scenario.yaml] [-o text|json]
//
// which runs Tessera's vgpu plugin inside Volcano's real scheduler on a described
// cluster (the embedded default when -f is absent) and prints where every job's pods
// and cards went, and why the rest did not fit.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/plugins/sim"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "simulate" {
		fmt.Fprintln(os.Stderr, "usage: tessera simulate [-f scenario.yaml] [-o text|json] [-v N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("simulate", flag.ExitOnError)
	file := fs.String("f", "", "scenario file (YAML); the embedded default when empty")
	out := fs.String("o", "text", "output format: text or json")
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "true")
	_ = fs.Set("v", "0")
	_ = fs.Set("stderrthreshold", "FATAL")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	if err := simulate(*file, *out); err != nil {
		fmt.Fprintln(os.Stderr, "tessera simulate:", err)
		os.Exit(1)
	}
}

func simulate(file, out string) error {
	if out != "text" && out != "json" {
		return fmt.Errorf("-o %q: want text or json", out)
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
