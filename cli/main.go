package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tessera-gpu/tessera/internal/buildinfo"
)

// Command is a command that cmd/tessera adds to the cluster commands (simulate, which
// needs Volcano's scheduler and so lives with the binary).
type Command struct {
	Name, Args, Summary string
	// Help is the text after the usage line of `tessera NAME --help` (its flags).
	Help string
	Run  func(ctx context.Context, env Env, args []string) error
}

// Main runs the tool as `tessera ARGS...` or `kubectl tessera ARGS...` and returns the
// exit code: 0, 1 for a failure, 2 for a command line it cannot understand. Help is
// asked for with -h, --help or `help [COMMAND]`, for the tool or any command, and
// printed to stdout with exit code 0, as kubectl plugins are expected to.
func Main(ctx context.Context, env Env, args []string, extra ...Command) int {
	cmds := commandTable(extra)
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage(cmds))
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "--help", "help":
		if name == "help" && len(rest) > 0 {
			return help(env, cmds, rest[0])
		}
		fmt.Fprint(env.Stdout, usage(cmds))
		return 0
	case "--version":
		name = "version"
	case "__complete":
		if err := complete(env.Stdout, rest, cmds); err != nil {
			return 1
		}
		return 0
	}
	c := findCommand(cmds, name)
	if c == nil {
		fmt.Fprintf(env.Stderr, "tessera: unknown command %q\n\n%s", name, usage(cmds))
		return 2
	}
	if wantsHelp(rest) {
		return help(env, cmds, name)
	}
	err := c.Run(ctx, env, rest)
	if errors.Is(err, ErrUsage) {
		fmt.Fprintf(env.Stderr, "tessera %s: %v\n\n%s", name, err, commandHelp(c))
		return 2
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "tessera %s: %v\n", name, err)
		return 1
	}
	return 0
}

// wantsHelp: -h or --help anywhere before a "--" (no pod or file name starts with "-").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--help", "-help":
			return true
		}
	}
	return false
}

func help(env Env, cmds []Command, name string) int {
	c := findCommand(cmds, name)
	if c == nil {
		fmt.Fprintf(env.Stderr, "tessera help: unknown command %q\n\n%s", name, usage(cmds))
		return 2
	}
	fmt.Fprint(env.Stdout, commandHelp(c))
	return 0
}

// commandTable is every command, in the order `tessera --help` lists them.
func commandTable(extra []Command) []Command {
	var cmds []Command
	for i := range clusterCommands {
		c := &clusterCommands[i]
		var flags strings.Builder
		var o options
		fs := c.flagSet(&o)
		flags.WriteString("Flags:\n")
		flags.WriteString(fs.FlagUsages())
		cmds = append(cmds, Command{Name: c.name, Args: c.args, Summary: c.summary, Help: flags.String(),
			Run: func(ctx context.Context, env Env, args []string) error { return Run(ctx, env, c.name, args) }})
	}
	cmds = append(cmds, extra...)
	cmds = append(cmds,
		Command{Name: "version", Summary: "the version and commit of this build (also --version)",
			Run: func(_ context.Context, env Env, args []string) error {
				if len(args) != 0 {
					return fmt.Errorf("%w: version takes no arguments", ErrUsage)
				}
				_, err := fmt.Fprintln(env.Stdout, buildinfo.String("tessera"))
				return err
			}},
		Command{Name: "completion", Args: "bash|zsh", Summary: "a shell completion script (see --help)",
			Help: completionHelp,
			Run: func(_ context.Context, env Env, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: completion takes one shell: bash or zsh", ErrUsage)
				}
				return writeCompletion(env.Stdout, args[0], cmds)
			}},
		Command{Name: "help", Args: "[COMMAND]", Summary: "this text, or a command's flags (also -h, --help)"},
	)
	return cmds
}

func findCommand(cmds []Command, name string) *Command {
	for i := range cmds {
		if cmds[i].Name == name && cmds[i].Run != nil {
			return &cmds[i]
		}
	}
	return nil
}

func usage(cmds []Command) string {
	var b strings.Builder
	b.WriteString("usage: tessera <command> [flags]\n\nCommands (also run as \"kubectl tessera <command>\"):\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %-21s %s\n", strings.TrimSpace(c.Name+" "+c.Args), c.Summary)
	}
	b.WriteString("\n" + clusterFlags + "\n\"tessera <command> --help\" lists a command's flags.\n")
	return b.String()
}

func commandHelp(c *Command) string {
	s := fmt.Sprintf("usage: tessera %s\n\n%s\n", strings.Join(strings.Fields(c.Name+" "+c.Args+" [flags]"), " "), c.Summary)
	if c.Help != "" {
		s += "\n" + c.Help
	}
	return s
}

// Usage is the tool's command summary with the cluster commands only.
func Usage() string { return usage(commandTable(nil)) }
