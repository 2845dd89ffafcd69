package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/pluginargs"
)

// ClusterFlags are the client flags of the cluster commands (--kubeconfig, kubectl's
// --context, -n, -s, ... and --scheduler-conf, --scheduler-configmap) for a command
// that parses its own flags outside this package: tessera simulate --from-cluster.
// They mean what they mean for explain.
type ClusterFlags struct {
	o options
}

// Bind adds the flags to fs.
func (f *ClusterFlags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.o.kubeconfig, "kubeconfig", "", "kubeconfig path (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl
	clientcmd.BindOverrideFlags(&f.o.overrides, fs, names)
	fs.StringVar(&f.o.conf, "scheduler-conf", "", "volcano-scheduler.conf to read the vgpu arguments from")
	fs.StringVar(&f.o.confMap, "scheduler-configmap", "", "NAMESPACE/NAME of the ConfigMap holding volcano-scheduler.conf "+
		"(default: the chart's ConfigMap, found in the cluster as explain finds it)")
}

// RESTConfig is the client configuration the flags select, loaded as kubectl loads it.
func (f *ClusterFlags) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.o.kubeconfig != "" {
		rules.ExplicitPath = f.o.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &f.o.overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// SchedulerArgs reads the vgpu plugin's arguments as explain does: from the conf file
// or ConfigMap the flags name, else from the chart's ConfigMap found in the cluster,
// else the plugin's defaults. What keeps the conf from being read, and what in it
// keeps the plugin from its job, goes to warn; source says where it was read ("" for
// the defaults). Arguments the plugin refuses keep their defaults, as in the scheduler.
func (f *ClusterFlags) SchedulerArgs(ctx context.Context, client kubernetes.Interface, warn func(string)) (pluginargs.Args, string, error) {
	args, conf, findings, err := vgpuArgs(ctx, client, &f.o, true, warn)
	var bad *pluginargs.InvalidError
	if errors.As(err, &bad) {
		warn(fmt.Sprintf("%v (the scheduler uses the defaults for these too)", bad.Err))
	} else if err != nil {
		return pluginargs.Args{}, "", err
	}
	for _, finding := range findings {
		warn("scheduler conf: " + finding)
	}
	source := ""
	if conf != nil {
		source = conf.source
	}
	return args, source, nil
}
