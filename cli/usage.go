package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// annotationCluster marks the commands that read the cluster and so take the global flags.
const annotationCluster = "tessera.io/cluster-command"

// helpText is what -h, --help and `help` print: the usage line with the name the user
// typed (tessera, or kubectl tessera), what the command does, its flags, and the
// global flags it takes before or after its name.
func helpText(c *cobra.Command) string {
	var b strings.Builder
	path := c.CommandPath()
	if !c.HasParent() {
		fmt.Fprintf(&b, "usage: %s <command> [flags]\n\n%s\n\nCommands:\n", path, c.Short)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				fmt.Fprintf(&b, "  %-21s %s\n", sub.Use, sub.Short)
			}
		}
		fmt.Fprintf(&b, "\nGlobal flags (before or after the command):\n%s", c.PersistentFlags().FlagUsages())
		fmt.Fprintf(&b, "\n\"%s <command> --help\" lists a command's own flags.\n", path)
		return b.String()
	}
	use := strings.TrimSpace(strings.TrimPrefix(c.Use, c.Name()))
	fmt.Fprintf(&b, "usage: %s\n\n%s\n", strings.Join(strings.Fields(path+" "+use+" [flags]"), " "), c.Short)
	if c.Long != "" {
		fmt.Fprintf(&b, "\n%s", c.Long)
	}
	if c.DisableFlagParsing {
		return b.String() // it reads its own flags; its Long lists them
	}
	if local := c.LocalNonPersistentFlags(); local.HasAvailableFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", local.FlagUsages())
	}
	if inherited := c.InheritedFlags(); inherited.HasAvailableFlags() && c.Annotations[annotationCluster] != "" {
		fmt.Fprintf(&b, "\nGlobal flags (before or after the command):\n%s", inherited.FlagUsages())
	}
	return b.String()
}
