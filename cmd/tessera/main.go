// Command tessera is Tessera's user CLI, also installed as kubectl-tessera so that it
// runs as "kubectl tessera ...":
//
//	tessera nodes                    cards per node, with usage, QoS pool, health and pods
//	tessera pod NAME                 a pod's cards and its node handoff
//	tessera explain POD              why a pending vGPU pod does not fit, node by node
//	tessera report --html FILE       a self-contained HTML card map
//	tessera simulate [-f scenario]   the vgpu plugin inside Volcano's scheduler, no API server
//
// Every command takes -o json. The cluster commands live in package cli; simulate is
// the command tessera-simulate, run from beside this one, so that the CLI links no
// Volcano package.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/tessera-gpu/tessera/cli"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, cli.Usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	if cmd == "simulate" {
		os.Exit(simulate(args))
	}
	err := cli.Run(context.Background(), cli.DefaultEnv(), cmd, args)
	if errors.Is(err, cli.ErrUsage) {
		fmt.Fprintf(os.Stderr, "tessera %s: %v\n\n%s", cmd, err, cli.Usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tessera %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

// simulator is the command that runs simulate.
const simulator = "tessera-simulate"

// simulate runs tessera-simulate from this command's directory (where make build and
// the images install both), else from PATH, and returns its exit code: it reports its
// own errors.
func simulate(args []string) int {
	path := simulator
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), simulator); isFile(p) {
			path = p
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "tessera simulate: %v (simulate runs %s, installed beside tessera: make build puts both in bin/)\n", err, simulator)
		return 1
	}
	return 0
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
