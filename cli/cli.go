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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// Usage is the command summary shared by `tessera` and `kubectl tessera`.
const Usage = `usage: tessera <command> [flags]

Commands (also run as "kubectl tessera <command>"):
  nodes                 cards per node: model, memory used/total, cores used, QoS pool, health, pods
  pod NAME              a pod's cards and where the node handoff stands
  explain POD           why a pending vGPU pod does not fit, node by node (the scheduler's own engine)
  report --html FILE    a self-contained HTML card map
  simulate              run the vgpu plugin inside Volcano's scheduler on a described cluster (no API server)

Flags of the cluster commands:
  -o, --output text|json         output format (default text)
  -n, --namespace NS             namespace of the pod (default: the kubeconfig context's)
      --kubeconfig PATH          kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)
      --context NAME             kubeconfig context
      --scheduler-conf PATH      read the vgpu arguments from this volcano-scheduler.conf
      --scheduler-configmap NS/NAME  ... or from this ConfigMap's volcano-scheduler.conf key
                                 (default: the vgpu plugin's documented defaults)
`

// Env carries what a command needs from outside; tests replace every field.
type Env struct {
	Stdout, Stderr io.Writer
	// Client builds the Kubernetes client and returns the context's namespace.
	Client func(kubeconfig, context string) (kubernetes.Interface, string, error)
	Now    func() time.Time
}

// DefaultEnv talks to the cluster of the user's kubeconfig.
func DefaultEnv() Env {
	return Env{Stdout: os.Stdout, Stderr: os.Stderr, Client: kubeClient, Now: time.Now}
}

func kubeClient(kubeconfig, kubeContext string) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
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
	output, namespace, kubeconfig, context, conf, confMap, html string
}

// Run executes one cluster command (nodes, pod, explain, report).
func Run(ctx context.Context, env Env, command string, args []string) error {
	switch command {
	case "nodes", "pod", "explain", "report":
	default:
		return fmt.Errorf("%w: unknown command %q", ErrUsage, command)
	}
	fs := pflag.NewFlagSet(command, pflag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var o options
	fs.StringVarP(&o.output, "output", "o", "text", "text or json")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "namespace of the pod")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig path")
	fs.StringVar(&o.context, "context", "", "kubeconfig context")
	fs.StringVar(&o.conf, "scheduler-conf", "", "volcano-scheduler.conf to read the vgpu arguments from")
	fs.StringVar(&o.confMap, "scheduler-configmap", "", "NAMESPACE/NAME of the ConfigMap holding volcano-scheduler.conf")
	if command == "report" {
		fs.StringVar(&o.html, "html", "", "write the HTML card map to this file")
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("%w: -o %q: want text or json", ErrUsage, o.output)
	}
	pos := fs.Args()
	needPod := command == "pod" || command == "explain"
	if needPod && len(pos) != 1 || !needPod && len(pos) != 0 {
		return fmt.Errorf("%w: %s takes %s", ErrUsage, command, map[bool]string{true: "one pod name", false: "no arguments"}[needPod])
	}
	if command == "report" && o.html == "" && o.output != "json" {
		return fmt.Errorf("%w: report needs --html FILE (or -o json)", ErrUsage)
	}
	client, ns, err := env.Client(o.kubeconfig, o.context)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if o.namespace != "" {
		ns = o.namespace
	}
	if ns == "" {
		ns = "default"
	}
	args2, err := vgpuArgs(ctx, client, o)
	var bad *pluginargs.InvalidError
	if errors.As(err, &bad) {
		fmt.Fprintf(env.Stderr, "warning: %v (the scheduler uses the defaults for these too)\n", bad.Err)
	} else if err != nil {
		return err
	}
	snap, err := Load(ctx, client, args2, env.Now())
	if err != nil {
		return err
	}
	var view any
	var text func(io.Writer) error
	switch command {
	case "nodes":
		nodes := snap.NodesView()
		view, text = nodes, func(w io.Writer) error { return WriteNodesTable(w, nodes) }
	case "pod", "explain":
		pod := snap.FindPod(ns, pos[0])
		if pod == nil {
			// Succeeded and failed pods are not in the snapshot; fetch directly.
			p, err := client.CoreV1().Pods(ns).Get(ctx, pos[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", ns, pos[0], err)
			}
			pod = p
		}
		if command == "pod" {
			v := snap.PodView(pod)
			view, text = v, func(w io.Writer) error { return WritePod(w, v) }
		} else {
			v := snap.Explain(pod)
			view, text = v, func(w io.Writer) error { return WriteExplain(w, v) }
		}
	case "report":
		r := BuildReport(snap.NodesView(), snap.Now)
		if o.html != "" {
			if err := writeFile(o.html, func(w io.Writer) error { return WriteReport(w, r) }); err != nil {
				return err
			}
			if o.output != "json" {
				fmt.Fprintf(env.Stdout, "wrote %s: %d nodes, %d cards\n", o.html, r.Totals.Nodes, r.Totals.Cards)
				return nil
			}
		}
		view = r
	default:
		return fmt.Errorf("%w: unknown command %q", ErrUsage, command)
	}
	if o.output == "json" {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(view)
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

// vgpuArgs reads the scheduler's vgpu arguments when the user points at its conf.
func vgpuArgs(ctx context.Context, client kubernetes.Interface, o options) (pluginargs.Args, error) {
	var conf string
	switch {
	case o.conf != "":
		b, err := os.ReadFile(o.conf)
		if err != nil {
			return pluginargs.Args{}, err
		}
		conf = string(b)
	case o.confMap != "":
		ns, name, ok := strings.Cut(o.confMap, "/")
		if !ok {
			return pluginargs.Args{}, fmt.Errorf("%w: --scheduler-configmap %q: want NAMESPACE/NAME", ErrUsage, o.confMap)
		}
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return pluginargs.Args{}, fmt.Errorf("scheduler ConfigMap: %w", err)
		}
		conf = cm.Data["volcano-scheduler.conf"]
	default:
		return pluginargs.Defaults(), nil
	}
	return pluginargs.FromConf(conf)
}
