package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tessera-gpu/tessera/internal/buildinfo"
)

// newRoot is the command tree: the cluster commands, the extra ones, version,
// completion and help. The global flags are the root's persistent flags, so kubectl's
// habit of putting them before the command works.
func newRoot(env Env, extra []Command) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "tessera",
		Short: "Tessera's view of a cluster's fractional GPUs: cards, pods, and why a vGPU pod waits",
		// The version flag below has no -v: kubectl's -v is verbosity.
		Version:           buildinfo.String("tessera"),
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &unknownCommandError{name: args[0], maybe: c.SuggestionsFor(args[0])}
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error { return errNoCommand },
	}
	if env.Plugin {
		// krew and kubectl run the binary as kubectl-tessera: completion scripts are for
		// that name, and usage lines say "kubectl tessera".
		root.Use = "kubectl-tessera"
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl tessera"}
	}
	root.SuggestionsMinimumDistance = 2 // cobra's default, which SuggestionsFor alone does not apply
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print the version and commit of this build")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", ErrUsage, err) })
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { fmt.Fprint(c.OutOrStdout(), helpText(c)) })
	o.bindGlobal(root.PersistentFlags())
	registerFlagCompletions(root, env, o)
	for _, c := range clusterCommands() {
		root.AddCommand(c.cobraCommand(env, o))
	}
	root.AddCommand(cardCommands(env, o)...)
	for _, e := range extra {
		root.AddCommand(extraCommand(env, e))
	}
	root.AddCommand(versionCommand(env), completionCommand(root))
	root.SetHelpCommand(helpCommand(root))
	return root
}

// extraCommand runs a command that parses its own flags.
func extraCommand(env Env, e Command) *cobra.Command {
	return &cobra.Command{
		Use:                strings.TrimSpace(e.Name + " " + e.Args),
		Short:              e.Summary,
		Long:               e.Help,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			if wantsHelp(args) {
				return c.Help()
			}
			return e.Run(c.Context(), env, args)
		},
	}
}

func versionCommand(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "the version and commit of this build (also --version)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return fmt.Errorf("%w: version takes no arguments", ErrUsage)
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(env.Stdout, buildinfo.String("tessera"))
			return err
		},
	}
}

// helpCommand answers `help [COMMAND]` on stdout; a command that is none is a usage
// error, not a page of help.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "this text, or a command's flags (also -h, --help)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return fmt.Errorf("%w: help takes one command", ErrUsage)
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, c := range root.Commands() {
				if c.IsAvailableCommand() {
					names = append(names, c.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return root.Help()
			}
			target, rest, err := root.Find(args)
			if err != nil || target == root || len(rest) > 0 || !target.IsAvailableCommand() {
				return &unknownCommandError{name: args[0], maybe: root.SuggestionsFor(args[0])}
			}
			return target.Help()
		},
	}
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

// contextOf is the command's context, or a background one for a command run without.
func contextOf(c *cobra.Command) context.Context {
	if ctx := c.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
