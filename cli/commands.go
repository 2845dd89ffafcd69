package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// options are the flags of the cluster commands. The global ones are bound on the root
// command, so they are taken before the command as after it (kubectl tessera -n ns pod x).
type options struct {
	out                       outputFlags
	kubeconfig, conf, confMap string
	allNamespaces             bool
	overrides                 clientcmd.ConfigOverrides
	// Each command's own.
	html, selector string
}

// bindGlobal binds the flags every cluster command takes.
func (o *options) bindGlobal(fs *pflag.FlagSet) {
	o.out.bind(fs)
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "read the pods of every namespace, or fail (default: every namespace the account may list, else only -n's, with a warning)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl
	clientcmd.BindOverrideFlags(&o.overrides, fs, names)
	fs.StringVar(&o.conf, "scheduler-conf", "", "volcano-scheduler.conf to read the vgpu arguments from")
	fs.StringVar(&o.confMap, "scheduler-configmap", "", "NAMESPACE/NAME of the ConfigMap holding volcano-scheduler.conf "+
		"(default: the plugin's defaults; explain finds the chart's ConfigMap itself)")
}

// argKind is what a cluster command takes after its name.
type argKind int

const (
	argNone  argKind = iota
	argPod           // exactly one pod name
	argNodes         // any number of node names
)

// clusterCommand is one command that reads the cluster: its own flags and arguments,
// and the view it makes of a snapshot. runCluster does the rest the same way for each.
type clusterCommand struct {
	name, args, summary string
	arg                 argKind
	// needsNodes: the view is made of the cluster's Nodes; an account that may not
	// list them gets an error saying so instead of an empty view.
	needsNodes bool
	// findConf: without --scheduler-conf or --scheduler-configmap, look for the
	// scheduler's conf in the cluster.
	findConf bool
	flags    func(fs *pflag.FlagSet, o *options)
	check    func(o *options) error
	view     func(ctx context.Context, c *clusterRun) (view any, text func(io.Writer) error, err error)
	// table is the view as kubectl's table, for text and -o wide; nil: text only.
	table func(view any) *metav1.Table
}

// clusterRun is what a command's view gets: the parsed flags, the client, the snapshot.
type clusterRun struct {
	o      *options
	ns     string
	pos    []string
	client kubernetes.Interface
	snap   *Snapshot
	conf   *schedConf
	// findings: what in the scheduler's conf keeps the vgpu plugin from its job.
	findings []string
	// after is an error returned once the view is printed (a node name that is no node).
	after error
}

// clusterCommands are the commands made of a snapshot of the cluster, in the order
// `tessera --help` lists them.
func clusterCommands() []clusterCommand {
	return []clusterCommand{
		{name: "nodes", args: "[NAME...]", arg: argNodes, needsNodes: true,
			summary: "cards per node: model, memory used/total, cores used, QoS pool, health, pods",
			flags: func(fs *pflag.FlagSet, o *options) {
				fs.StringVarP(&o.selector, "selector", "l", "", "only the nodes whose labels match this selector (kubectl's syntax: key=value,key!=value,key in (a,b))")
			},
			check: func(o *options) error {
				if _, err := labels.Parse(o.selector); err != nil {
					return fmt.Errorf("%w: -l %q: %v", ErrUsage, o.selector, err)
				}
				return nil
			},
			view: func(_ context.Context, c *clusterRun) (any, func(io.Writer) error, error) {
				sel, _ := labels.Parse(c.o.selector) // checked before the cluster was read
				nodes, missing := pickNodes(c.snap.NodesView(), c.snap.Nodes, c.pos, sel)
				if len(missing) > 0 {
					c.after = fmt.Errorf("nodes not found: %s", strings.Join(missing, ", "))
				}
				return nodes, nil, nil
			},
			table: func(view any) *metav1.Table { return nodesTable(view.([]NodeView)) }},
		{name: "pod", args: "NAME", arg: argPod, summary: "a pod's cards and where the node handoff stands",
			view: func(ctx context.Context, c *clusterRun) (any, func(io.Writer) error, error) {
				pod, err := c.pod(ctx)
				if err != nil {
					return nil, nil, err
				}
				v := c.snap.PodView(pod)
				return v, func(w io.Writer) error { return WritePod(w, v) }, nil
			}},
		{name: "explain", args: "POD", arg: argPod, needsNodes: true, findConf: true,
			summary: "why a pending vGPU pod does not fit, node by node (the scheduler's own engine and conf)",
			view: func(ctx context.Context, c *clusterRun) (any, func(io.Writer) error, error) {
				pod, err := c.pod(ctx)
				if err != nil {
					return nil, nil, err
				}
				v := c.snap.Explain(pod)
				v.ConfFindings = c.findings
				if c.conf != nil {
					v.ConfSource = c.conf.source
				}
				return v, func(w io.Writer) error { return WriteExplain(w, v) }, nil
			}},
		{name: "report", args: "--html FILE", needsNodes: true, summary: "a self-contained HTML card map",
			flags: func(fs *pflag.FlagSet, o *options) {
				fs.StringVar(&o.html, "html", "", "write the HTML card map to this file")
			},
			check: func(o *options) error {
				if o.html == "" && (o.out.format == "" || o.out.format == formatText) && o.out.template == "" {
					return fmt.Errorf("%w: report needs --html FILE (or -o json|yaml|jsonpath=...)", ErrUsage)
				}
				return nil
			},
			view: func(_ context.Context, c *clusterRun) (any, func(io.Writer) error, error) {
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
}

// cobraCommand is the command's place in the command tree.
func (c *clusterCommand) cobraCommand(env Env, o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   strings.TrimSpace(c.name + " " + c.args),
		Short: c.summary,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case c.arg == argPod && len(args) != 1:
				return fmt.Errorf("%w: %s takes one pod name", ErrUsage, c.name)
			case c.arg == argNone && len(args) != 0:
				return fmt.Errorf("%w: %s takes no arguments", ErrUsage, c.name)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCluster(cmd.Context(), env, c, o, args)
		},
		ValidArgsFunction: argCompletion(env, o, c.arg),
		Annotations:       map[string]string{annotationCluster: "true"},
	}
	if c.flags != nil {
		c.flags(cmd.Flags(), o)
	}
	return cmd
}

// runCluster does one cluster command: flags first, then the cluster, then the view.
func runCluster(ctx context.Context, env Env, c *clusterCommand, o *options, pos []string) error {
	p, err := o.out.printer()
	if err != nil {
		return err
	}
	if p.mode == printWide && c.table == nil {
		return fmt.Errorf("%w: -o wide: %s has no table (nodes has)", ErrUsage, c.name)
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
	r := &clusterRun{o: o, pos: pos, client: client, ns: ns}
	if r.ns == "" {
		r.ns = "default"
	}
	warn := func(s string) { fmt.Fprintf(env.Stderr, "warning: %s\n", s) }
	args, conf, findings, err := vgpuArgs(ctx, client, o, c.findConf, warn)
	var bad *pluginargs.InvalidError
	if errors.As(err, &bad) {
		warn(fmt.Sprintf("%v (the scheduler uses the defaults for these too)", bad.Err))
	} else if err != nil {
		return err
	}
	for _, f := range findings {
		warn("scheduler conf: " + f)
	}
	r.conf, r.findings = conf, findings
	scope := Scope{Namespace: r.ns, AllNamespaces: o.allNamespaces, NeedNodes: c.needsNodes}
	if r.snap, err = Load(ctx, client, args, env.Now(), scope); err != nil {
		return err
	}
	for _, gap := range r.snap.Unread {
		warn("partial view: " + gap)
	}
	view, text, err := c.view(ctx, r)
	if err != nil {
		return err
	}
	var table *metav1.Table
	if c.table != nil {
		table = c.table(view)
	}
	if err := p.print(env.Stdout, env.Stderr, view, text, table); err != nil {
		return err
	}
	return r.after
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
