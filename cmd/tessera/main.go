// Command tessera is Tessera's user CLI, also installed as kubectl-tessera so that it
// runs as "kubectl tessera ...":
//
//	tessera nodes                    cards per node, with usage, QoS pool, health and pods
//	tessera pod NAME                 a pod's cards and its node handoff
//	tessera explain POD              why a pending vGPU pod does not fit, node by node
//	tessera report --html FILE       a self-contained HTML card map
//	tessera ui                       the live card map on localhost, kept current by watches
//	tessera simulate [-f scenario]   the vgpu plugin inside Volcano's scheduler, no API server
//	tessera version                  this build's version and commit
//	tessera completion SHELL         a completion script: bash, zsh, fish, powershell,
//	                                 or kubectl-plugin (kubectl_complete-tessera)
//
// -h or --help, after the tool or any command, prints its help on stdout and exits 0.
// The cluster commands take kubectl's output flags (-o json|yaml|wide|jsonpath=...|
// custom-columns=..., --no-headers) and client flags, before or after the command. They
// live in package cli; simulate is the command tessera-simulate, run from beside this
// one, so that the CLI links no Volcano package.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/cli/ui"
)

func main() {
	args := os.Args[1:]
	// simulate hands its arguments to tessera-simulate, which reports its own errors and
	// exit code; its help comes from the command table like every other command's.
	if len(args) > 0 && args[0] == "simulate" && !slices.ContainsFunc(args[1:], isHelpFlag) {
		os.Exit(simulate(args[1:]))
	}
	os.Exit(cli.Main(context.Background(), cli.DefaultEnv(), args, cli.Command{
		Name:    "simulate",
		Summary: "run the vgpu plugin inside Volcano's scheduler on a described cluster (no API server)",
		Help:    simulateHelp,
		// Reached only when flags come before "simulate" (tessera --kubeconfig X simulate):
		// tessera-simulate reads its own flags, so they must follow the command.
		Run: func(_ context.Context, _ cli.Env, args []string) error {
			return fmt.Errorf("%w: put every flag after \"simulate\" (tessera simulate --from-cluster --kubeconfig FILE ...): "+
				"tessera-simulate reads its own", cli.ErrUsage)
		},
	}, cli.Command{
		Name:    "ui",
		Summary: ui.Summary,
		Help:    ui.Usage(),
		Run: func(ctx context.Context, env cli.Env, args []string) error {
			return ui.Main(ctx, args, env.Stdout, env.Stderr)
		},
	}))
}

const simulateHelp = `Usage:
  tessera simulate [-f FILE] [-o text|json]
  tessera simulate --from-cluster [--add-nodes N --node-shape SHAPE] [-o text|json] [--kubeconfig FILE ...]

Flags:
  -f FILE              scenario file (YAML); the embedded default when empty
  -o text|json         output format (default text)
  --from-cluster       simulate the live cluster of the kubeconfig (cards, running and pending vGPU pods, queues)
  --add-nodes N        with --from-cluster: add N nodes of --node-shape and show what they would place
  --node-shape SHAPE   the added nodes' machine: dgxa100, or MODELxCOUNT such as H100x8
`

func isHelpFlag(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// simulator is the command that runs simulate.
const simulator = "tessera-simulate"

// simulate runs tessera-simulate from this command's directory (where make build and
// the images install both), else from PATH, and returns its exit code: it reports its
// own errors.
func simulate(args []string) int {
	path := simulator
	if self, err := os.Executable(); err == nil {
		// krew runs the plugin through a symlink (~/.krew/bin/kubectl-tessera) into its
		// store, where tessera-simulate sits; some systems report the link as the executable.
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		if p := filepath.Join(filepath.Dir(self), simulator+exeSuffix()); isFile(p) {
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
	case err != nil && runtime.GOOS == "windows":
		// It links Volcano's scheduler, which does not build for Windows.
		fmt.Fprintf(os.Stderr, "tessera simulate: %v (simulate runs %s, which is built for Linux and macOS only: run it there)\n", err, simulator)
		return 1
	case err != nil:
		fmt.Fprintf(os.Stderr, "tessera simulate: %v (simulate runs %s, installed beside tessera: make build puts both in bin/)\n", err, simulator)
		return 1
	}
	return 0
}

// exeSuffix is what executables' names end in: ".exe" on Windows.
func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
