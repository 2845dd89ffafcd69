package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Env carries what a command needs from outside; tests replace every field.
type Env struct {
	Stdout, Stderr io.Writer
	// Client builds the Kubernetes client from the kubeconfig path and kubectl's
	// override flags, and returns the namespace they select.
	Client func(kubeconfig string, overrides *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error)
	Now    func() time.Time
	// Plugin: kubectl runs the tool as "kubectl tessera"; usage lines and hints say so.
	Plugin bool
}

// DefaultEnv talks to the cluster of the user's kubeconfig.
func DefaultEnv() Env {
	return Env{Stdout: os.Stdout, Stderr: os.Stderr, Client: kubeClient, Now: time.Now, Plugin: AsPlugin(os.Args[0], os.Getenv)}
}

// AsPlugin reports whether the tool runs as a kubectl plugin: its binary is
// kubectl-tessera (kubectl and krew run it by that name), or kubectl said it started
// it: KUBECTL_PATH, which newer kubectl sets for its plugins, or KUBECTL_PLUGINS_CALLER
// of the plugin mechanism kubectl had before 1.12.
func AsPlugin(argv0 string, getenv func(string) string) bool {
	name := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	return name == "kubectl-tessera" || getenv("KUBECTL_PATH") != "" || getenv("KUBECTL_PLUGINS_CALLER") != ""
}

// kubeClient loads the client configuration as kubectl does: the kubeconfig (explicit
// path, $KUBECONFIG, ~/.kube/config, or in-cluster) with the command line's overrides.
func kubeClient(kubeconfig string, overrides *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := kubernetes.NewForConfig(cfg)
	return c, ns, err
}

// ErrUsage marks a command line that could not be understood (exit code 2).
var ErrUsage = errors.New("usage")

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Run executes one command (nodes, pod, explain, report, or any other) with its
// arguments, as "tessera COMMAND ARGS..." would, and returns its error; a command line
// it cannot understand is an ErrUsage.
func Run(ctx context.Context, env Env, command string, args []string) error {
	root := newRoot(env, nil)
	root.SetArgs(append([]string{command}, args...))
	_, err := root.ExecuteContextC(ctx)
	return err
}
