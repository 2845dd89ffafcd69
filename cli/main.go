package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Command is a command that cmd/tessera adds to the cluster commands (simulate, which
// needs Volcano's scheduler and so lives with the binary). Its arguments reach Run as
// given: it parses its own flags.
type Command struct {
	Name, Args, Summary string
	// Help is the text after the usage line of `tessera NAME --help` (its flags).
	Help string
	Run  func(ctx context.Context, env Env, args []string) error
}

// Main runs the tool as `tessera ARGS...` or `kubectl tessera ARGS...` and returns the
// exit code: 0, 1 for a failure, 2 for a command line it cannot understand. Help is
// asked for with -h, --help or `help [COMMAND]`, for the tool or any command, and
// printed to stdout with exit code 0, as kubectl plugins are expected to. A command
// line it cannot understand gets one line saying why and one line of hint on stderr.
func Main(ctx context.Context, env Env, args []string, extra ...Command) int {
	root := newRoot(env, extra)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if cmd == nil {
		cmd = root
	}
	var unknown *unknownCommandError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNoCommand):
		fmt.Fprint(env.Stderr, helpText(root))
		return 2
	case errors.As(err, &unknown):
		fmt.Fprintf(env.Stderr, "%s: %v\n%s\n", cmd.CommandPath(), unknown, unknown.hint(root.CommandPath()))
		return 2
	case errors.Is(err, ErrUsage):
		msg := strings.TrimPrefix(err.Error(), ErrUsage.Error()+": ")
		fmt.Fprintf(env.Stderr, "%s: %s\nSee \"%s --help\".\n", cmd.CommandPath(), msg, cmd.CommandPath())
		return 2
	}
	fmt.Fprintf(env.Stderr, "%s: %v\n", cmd.CommandPath(), err)
	return 1
}

// errNoCommand: the tool was run without a command; the whole usage goes to stderr.
var errNoCommand = fmt.Errorf("%w: no command", ErrUsage)

// unknownCommandError is a command name that is none, with the commands it may have
// meant.
type unknownCommandError struct {
	name  string
	maybe []string
}

func (e *unknownCommandError) Error() string { return fmt.Sprintf("unknown command %q", e.name) }

func (e *unknownCommandError) Is(target error) bool { return target == ErrUsage }

// hint is the line after the error: the likeliest commands, and where the list is.
func (e *unknownCommandError) hint(tool string) string {
	list := fmt.Sprintf("%q lists the commands.", tool+" --help")
	if len(e.maybe) == 0 {
		return list
	}
	quoted := make([]string, len(e.maybe))
	for i, m := range e.maybe {
		quoted[i] = fmt.Sprintf("%q", m)
	}
	return fmt.Sprintf("Did you mean %s? %s", strings.Join(quoted, " or "), list)
}
