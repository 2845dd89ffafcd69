package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

const completionHelp = `Prints a completion script for the shell, or with kubectl-plugin the executable that
"kubectl tessera <TAB>" runs. Load a script in the current shell:

  source <(tessera completion bash)            # bash (needs the bash-completion package)
  source <(tessera completion zsh)             # zsh
  tessera completion fish | source             # fish
  tessera completion powershell | Out-String | Invoke-Expression

Run as "kubectl-tessera completion SHELL", the script completes kubectl-tessera. For
"kubectl tessera <TAB>" (kubectl 1.26 and later), kubectl runs an executable named
kubectl_complete-tessera from the PATH; the krew package carries it, but krew puts only
the plugin itself on the PATH, so add it once:

  kubectl tessera completion kubectl-plugin > ~/.krew/bin/kubectl_complete-tessera
  chmod +x ~/.krew/bin/kubectl_complete-tessera
`

// KubectlCompletion is the executable kubectl_complete-tessera: kubectl runs it with the
// words of "kubectl tessera ..." to complete, and it asks the plugin, which answers
// cobra's __complete protocol. It finds the plugin beside itself (krew's store, bin/ of
// make build, or ~/.krew/bin where krew links the plugin), else on the PATH.
const KubectlCompletion = `#!/usr/bin/env sh
# kubectl_complete-tessera: kubectl (1.26 and later) runs this for "kubectl tessera <TAB>".
here=$(dirname "$0")
if [ -x "$here/kubectl-tessera" ]; then exec "$here/kubectl-tessera" __complete "$@"; fi
exec kubectl-tessera __complete "$@"
`

// completionShells are the arguments of `completion`, each with its writer.
func completionShells(root *cobra.Command) map[string]func(io.Writer) error {
	return map[string]func(io.Writer) error{
		"bash":       func(w io.Writer) error { return root.GenBashCompletionV2(w, true) },
		"zsh":        root.GenZshCompletion,
		"fish":       func(w io.Writer) error { return root.GenFishCompletion(w, true) },
		"powershell": root.GenPowerShellCompletionWithDesc,
		"kubectl-plugin": func(w io.Writer) error {
			_, err := io.WriteString(w, KubectlCompletion)
			return err
		},
	}
}

func completionShellNames() []string {
	return []string{"bash", "zsh", "fish", "powershell", "kubectl-plugin"}
}

func completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:       "completion SHELL",
		Short:     "a completion script for bash, zsh, fish or powershell, or kubectl's plugin completion (see --help)",
		Long:      completionHelp,
		ValidArgs: completionShellNames(),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || !slices.Contains(completionShellNames(), args[0]) {
				return fmt.Errorf("%w: completion takes one of: bash, zsh, fish, powershell, kubectl-plugin", ErrUsage)
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			return completionShells(root)[args[0]](c.OutOrStdout())
		},
	}
}

// outputCompletions are the values -o completes to.
func outputCompletions() []string {
	return []string{"json", "yaml", "wide", "custom-columns=", "custom-columns-file=", "jsonpath=",
		"jsonpath-file=", "jsonpath-as-json=", "go-template=", "go-template-file="}
}

// registerFlagCompletions completes the global flags' values as kubectl does: output
// formats, the cluster's namespaces, the kubeconfig's contexts.
func registerFlagCompletions(root *cobra.Command, env Env, o *options) {
	noFiles := cobra.ShellCompDirectiveNoFileComp
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return outputCompletions(), noFiles | cobra.ShellCompDirectiveNoSpace
	})
	_ = root.RegisterFlagCompletionFunc("namespace", func(c *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		return clusterNames(c, env, o, "namespaces"), noFiles
	})
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = o.kubeconfig
		cfg, err := rules.Load()
		if err != nil {
			return nil, noFiles
		}
		var names []string
		for name := range cfg.Contexts {
			names = append(names, name)
		}
		slices.Sort(names)
		return names, noFiles
	})
}

// argCompletion completes a cluster command's arguments: the namespace's pods, or
// the nodes not named yet.
func argCompletion(env Env, o *options, kind argKind) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		switch {
		case kind == argPod && len(args) == 0:
			return clusterNames(c, env, o, "pods"), cobra.ShellCompDirectiveNoFileComp
		case kind == argNodes:
			var names []string
			for _, n := range clusterNames(c, env, o, "nodes") {
				if !slices.Contains(args, n) {
					names = append(names, n)
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// clusterNames lists the names of the pods (in the flags' namespace), nodes or
// namespaces, for completion: quickly, and nothing on any error (completion prints no
// errors).
func clusterNames(c *cobra.Command, env Env, o *options, what string) []string {
	client, ns, err := env.Client(o.kubeconfig, &o.overrides)
	if err != nil {
		return nil
	}
	if ns == "" {
		ns = "default"
	}
	ctx, cancel := context.WithTimeout(contextOf(c), 5*time.Second)
	defer cancel()
	var names []string
	switch what {
	case "pods":
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
	case "nodes":
		l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, n := range l.Items {
			names = append(names, n.Name)
		}
	case "namespaces":
		l, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, n := range l.Items {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	return names
}
