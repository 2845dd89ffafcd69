// Package ui serves the live card map of `kubectl tessera ui` on localhost: every
// card with who holds what, the Volcano queues' card shares against their fair share,
// and the vGPU pods waiting for cards with the scheduler's reason. Informers keep a
// cache of nodes, pods, queues and PodGroups; the page's data is rebuilt from it with
// the CLI's own views (package cli), debounced, and the page follows it through
// server-sent events without a reload. Nothing is deployed in the cluster.
package ui

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// Summary is the command's line in `tessera --help`.
const Summary = "serve the live card map on localhost (cards, queue shares, pending pods), kept current by watches"

// flags are the command line of `tessera ui`.
type flags struct {
	address, kubeconfig, conf, confMap string
	port                               int
	allNamespaces                      bool
	overrides                          clientcmd.ConfigOverrides
}

func flagSet(f *flags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("ui", pflag.ContinueOnError)
	fs.StringVar(&f.address, "address", DefaultAddress, "address to listen on; a non-loopback one serves every tenant's pod names to whoever reaches it")
	fs.IntVar(&f.port, "port", 0, "port to listen on (0: a free one; the URL is printed)")
	fs.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "read the pods of every namespace, or fail")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig path")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl
	clientcmd.BindOverrideFlags(&f.overrides, fs, names)
	fs.StringVar(&f.conf, "scheduler-conf", "", "volcano-scheduler.conf to read the vgpu arguments from")
	fs.StringVar(&f.confMap, "scheduler-configmap", "", "NAMESPACE/NAME of the ConfigMap holding volcano-scheduler.conf")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	return fs
}

// Usage is the help text of `tessera ui`: its flags.
func Usage() string {
	var f flags
	return "Flags:\n" + flagSet(&f).FlagUsages()
}

// Main runs `tessera ui ARGS...` until ctx ends or the process is interrupted
// (Ctrl-C, SIGTERM), which stop it cleanly and return nil. It prints the page's URL
// on stdout and warnings on stderr. A command line it cannot understand returns an
// error wrapping cli.ErrUsage; -h or --help prints Usage on stdout and returns nil.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f flags
	fs := flagSet(&f)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		_, err = fmt.Fprintf(stdout, "usage: tessera ui [flags]\n\n%s\n\n%s", Summary, Usage())
		return err
	} else if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: ui takes no arguments", cli.ErrUsage)
	}
	// Ctrl-C stops the server cleanly: open pages are told, the watches closed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loadingRules(f.kubeconfig), &f.overrides)
	c, err := clientsFor(loader)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	args2, findings, err := vgpuArgs(ctx, c, f)
	var bad *pluginargs.InvalidError
	if errors.As(err, &bad) {
		fmt.Fprintf(stderr, "warning: %v (the scheduler uses the defaults for these too)\n", bad.Err)
	} else if err != nil {
		return err
	}
	for _, finding := range findings {
		fmt.Fprintf(stderr, "warning: scheduler conf: %s\n", finding)
	}
	o := Options{Address: f.address, Remote: fs.Changed("address"), Port: f.port, Namespace: ns, AllNamespaces: f.allNamespaces, Args: args2}
	if o.Remote && !isLoopback(o.Address) {
		fmt.Fprintf(stderr, "warning: serving on %s: whoever reaches it sees every tenant's pods and cards, without logging in\n", o.Address)
	}
	return Serve(ctx, c, o, func(s Started) {
		for _, gap := range s.Unread {
			fmt.Fprintf(stderr, "warning: partial view: %s\n", gap)
		}
		fmt.Fprintf(stdout, "Tessera card map: %s (follows the cluster live; Ctrl-C stops it)\n", s.URL)
	})
}

func loadingRules(kubeconfig string) *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	return rules
}

// clientsFor makes the clients of the kubeconfig as kubectl loads it (explicit path,
// $KUBECONFIG, ~/.kube/config, or in-cluster) with the command line's overrides.
func clientsFor(loader clientcmd.ClientConfig) (Clients, error) {
	cfg, err := loader.ClientConfig()
	if err != nil {
		return Clients{}, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "tessera-ui"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	// Nodes and pods travel as protobuf: the informers list every one of them.
	kcfg := rest.CopyConfig(cfg)
	kcfg.ContentType = "application/vnd.kubernetes.protobuf"
	kube, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Kube: kube, Dynamic: dyn}, nil
}

// vgpuArgs reads the scheduler's vgpu arguments when the user points at its conf, as
// the other commands do (the plugin's defaults otherwise), and what in that conf keeps
// the plugin from its job.
func vgpuArgs(ctx context.Context, c Clients, f flags) (pluginargs.Args, []string, error) {
	var conf string
	switch {
	case f.conf != "":
		b, err := os.ReadFile(f.conf)
		if err != nil {
			return pluginargs.Args{}, nil, fmt.Errorf("scheduler conf: %w", err)
		}
		conf = string(b)
	case f.confMap != "":
		ns, name, ok := strings.Cut(f.confMap, "/")
		if !ok {
			return pluginargs.Args{}, nil, fmt.Errorf("%w: --scheduler-configmap %q: want NAMESPACE/NAME", cli.ErrUsage, f.confMap)
		}
		cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return pluginargs.Args{}, nil, fmt.Errorf("scheduler ConfigMap: %w", err)
		}
		conf = cm.Data["volcano-scheduler.conf"]
	default:
		return pluginargs.Defaults(), nil, nil
	}
	args, err := pluginargs.FromConf(conf)
	findings, ferr := pluginargs.ConfFindings(conf)
	if ferr != nil && err == nil {
		err = ferr
	}
	return args, findings, err
}
