package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// clusterFlags is the help text of the flags every cluster command takes.
const clusterFlags = `Flags of the cluster commands (nodes, pod, explain, report):
  -o, --output text|json|yaml    output format (default text)
  -n, --namespace NS             namespace of the pod (default: the kubeconfig context's)
  -A, --all-namespaces           read the pods of every namespace or fail (default: every namespace
                                 the account may list, else only -n's, with a warning)
      --kubeconfig PATH          kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)
      --context, --cluster, --user, -s/--server, --token, --as, --as-group, --as-uid,
      --certificate-authority, --client-certificate, --client-key, --insecure-skip-tls-verify,
      --tls-server-name, --request-timeout ...
                                 kubectl's client flags, with kubectl's meaning
      --scheduler-conf PATH      read the vgpu arguments from this volcano-scheduler.conf
      --scheduler-configmap NS/NAME  ... or from this ConfigMap's volcano-scheduler.conf key
                                 (default: the vgpu plugin's documented defaults)
`

// Env carries what a command needs from outside; tests replace every field.
type Env struct {
	Stdout, Stderr io.Writer
	// Client builds the Kubernetes client from the kubeconfig path and kubectl's
	// override flags, and returns the namespace they select.
	Client func(kubeconfig string, overrides *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error)
	Now    func() time.Time
}

// DefaultEnv talks to the cluster of the user's kubeconfig.
func DefaultEnv() Env {
	return Env{Stdout: os.Stdout, Stderr: os.Stderr, Client: kubeClient, Now: time.Now}
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

type options struct {
	output, kubeconfig, conf, confMap, html string
	allNamespaces                           bool
	overrides                               clientcmd.ConfigOverrides
}

// clusterCommand is one command that reads the cluster: its own flags and arguments,
// and the view it makes of a snapshot. Run does the rest the same way for each.
type clusterCommand struct {
	name, args, summary string
	// podArg: the command takes exactly one pod name; otherwise none.
	podArg bool
	// needsNodes: the view is made of the cluster's Nodes; an account that may not
	// list them gets an error saying so instead of an empty view.
	needsNodes bool
	flags      func(fs *pflag.FlagSet, o *options)
	check      func(o options) error
	view       func(ctx context.Context, env Env, c *clusterRun) (view any, text func(io.Writer) error, err error)
}

// clusterRun is what a command's view gets: the parsed flags, the client, the snapshot.
type clusterRun struct {
	o      options
	ns     string
	pos    []string
	client kubernetes.Interface
	snap   *Snapshot
	// findings: what in the scheduler's conf keeps the vgpu plugin from its job.
	findings []string
}

var clusterCommands = []clusterCommand{
	{name: "nodes", needsNodes: true, summary: "cards per node: model, memory used/total, cores used, QoS pool, health, pods",
		view: func(_ context.Context, _ Env, c *clusterRun) (any, func(io.Writer) error, error) {
			nodes := c.snap.NodesView()
			return nodes, func(w io.Writer) error { return WriteNodesTable(w, nodes) }, nil
		}},
	{name: "pod", args: "NAME", podArg: true, summary: "a pod's cards and where the node handoff stands",
		view: func(ctx context.Context, _ Env, c *clusterRun) (any, func(io.Writer) error, error) {
			pod, err := c.pod(ctx)
			if err != nil {
				return nil, nil, err
			}
			v := c.snap.PodView(pod)
			return v, func(w io.Writer) error { return WritePod(w, v) }, nil
		}},
	{name: "explain", needsNodes: true, args: "POD", podArg: true, summary: "why a pending vGPU pod does not fit, node by node (the scheduler's own engine)",
		view: func(ctx context.Context, _ Env, c *clusterRun) (any, func(io.Writer) error, error) {
			pod, err := c.pod(ctx)
			if err != nil {
				return nil, nil, err
			}
			v := c.snap.Explain(pod)
			v.ConfFindings = c.findings
			return v, func(w io.Writer) error { return WriteExplain(w, v) }, nil
		}},
	{name: "report", needsNodes: true, args: "--html FILE", summary: "a self-contained HTML card map",
		flags: func(fs *pflag.FlagSet, o *options) {
			fs.StringVar(&o.html, "html", "", "write the HTML card map to this file")
		},
		check: func(o options) error {
			if o.html == "" && o.output == "text" {
				return fmt.Errorf("%w: report needs --html FILE (or -o json|yaml)", ErrUsage)
			}
			return nil
		},
		view: func(_ context.Context, env Env, c *clusterRun) (any, func(io.Writer) error, error) {
			r := BuildReport(c.snap.NodesView(), c.snap.Now)
			if c.o.html == "" {
				return r, nil, nil
			}
			if err := writeFile(c.o.html, func(w io.Writer) error { return WriteReport(w, r) }); err != nil {
				return nil, nil, err
			}
			return r, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "wrote %s: %d nodes, %d cards\n", c.o.html, r.Totals.Nodes, r.Totals.Cards)
				return err
			}, nil
		}},
}

func findClusterCommand(name string) *clusterCommand {
	for i := range clusterCommands {
		if clusterCommands[i].name == name {
			return &clusterCommands[i]
		}
	}
	return nil
}

// flagSet is the command's flags: the shared cluster flags, then its own.
func (c *clusterCommand) flagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	fs.StringVarP(&o.output, "output", "o", "text", "text, json or yaml")
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "read the pods of every namespace, or fail")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl
	clientcmd.BindOverrideFlags(&o.overrides, fs, names)
	fs.StringVar(&o.conf, "scheduler-conf", "", "volcano-scheduler.conf to read the vgpu arguments from")
	fs.StringVar(&o.confMap, "scheduler-configmap", "", "NAMESPACE/NAME of the ConfigMap holding volcano-scheduler.conf")
	if c.flags != nil {
		c.flags(fs, o)
	}
	return fs
}

// pod is the pod the command names: from the snapshot, or fetched when it has finished.
func (c *clusterRun) pod(ctx context.Context) (*corev1.Pod, error) {
	if pod := c.snap.FindPod(c.ns, c.pos[0]); pod != nil {
		return pod, nil
	}
	// Succeeded and failed pods are not in the snapshot; fetch directly.
	p, err := c.client.CoreV1().Pods(c.ns).Get(ctx, c.pos[0], metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", c.ns, c.pos[0], err)
	}
	return p, nil
}

// Run executes one cluster command (nodes, pod, explain, report).
func Run(ctx context.Context, env Env, command string, args []string) error {
	c := findClusterCommand(command)
	if c == nil {
		return fmt.Errorf("%w: unknown command %q", ErrUsage, command)
	}
	var o options
	fs := c.flagSet(&o)
	fs.SetOutput(io.Discard) // errors are returned; --help is answered before Run
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if o.output != "text" && o.output != "json" && o.output != "yaml" {
		return fmt.Errorf("%w: -o %q: want text, json or yaml", ErrUsage, o.output)
	}
	r := &clusterRun{o: o, pos: fs.Args()}
	if c.podArg && len(r.pos) != 1 {
		return fmt.Errorf("%w: %s takes one pod name", ErrUsage, command)
	} else if !c.podArg && len(r.pos) != 0 {
		return fmt.Errorf("%w: %s takes no arguments", ErrUsage, command)
	}
	if c.check != nil {
		if err := c.check(o); err != nil {
			return err
		}
	}
	client, ns, err := env.Client(o.kubeconfig, &o.overrides)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	r.client, r.ns = client, ns
	if r.ns == "" {
		r.ns = "default"
	}
	args2, findings, err := vgpuArgs(ctx, client, o)
	var bad *pluginargs.InvalidError
	if errors.As(err, &bad) {
		fmt.Fprintf(env.Stderr, "warning: %v (the scheduler uses the defaults for these too)\n", bad.Err)
	} else if err != nil {
		return err
	}
	for _, f := range findings {
		fmt.Fprintf(env.Stderr, "warning: scheduler conf: %s\n", f)
	}
	r.findings = findings
	scope := Scope{Namespace: r.ns, AllNamespaces: o.allNamespaces, NeedNodes: c.needsNodes}
	if r.snap, err = Load(ctx, client, args2, env.Now(), scope); err != nil {
		return err
	}
	for _, gap := range r.snap.Unread {
		fmt.Fprintf(env.Stderr, "warning: partial view: %s\n", gap)
	}
	view, text, err := c.view(ctx, env, r)
	if err != nil {
		return err
	}
	switch o.output {
	case "json":
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(view)
	case "yaml":
		b, err := yaml.Marshal(view)
		if err != nil {
			return err
		}
		_, err = env.Stdout.Write(b)
		return err
	}
	return text(env.Stdout)
}

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

// vgpuArgs reads the scheduler's vgpu arguments when the user points at its conf,
// and what in that conf keeps the plugin from its job (pluginargs.ConfFindings).
func vgpuArgs(ctx context.Context, client kubernetes.Interface, o options) (pluginargs.Args, []string, error) {
	var conf string
	switch {
	case o.conf != "":
		b, err := os.ReadFile(o.conf)
		if err != nil {
			return pluginargs.Args{}, nil, err
		}
		conf = string(b)
	case o.confMap != "":
		ns, name, ok := strings.Cut(o.confMap, "/")
		if !ok {
			return pluginargs.Args{}, nil, fmt.Errorf("%w: --scheduler-configmap %q: want NAMESPACE/NAME", ErrUsage, o.confMap)
		}
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
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
